package image

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

// RootFS lists the files of src for one layer: a directory (its tree:
// regular files, directories and symbolic links with their permission
// bits; owners and times are not kept), a tar, optionally gzip-compressed
// (its entries), or one executable file, which becomes /NAME in an
// otherwise empty tree with the usual mount points.
func RootFS(src string) ([]File, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return dirFiles(src)
	}
	if files, err := tarFiles(src); err == nil {
		return files, nil
	} else if !errors.Is(err, errNotTar) {
		return nil, err
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("%s is neither a directory, a tar file nor an executable", src)
	}
	return []File{
		{Path: "/" + filepath.Base(src), Mode: 0o755, Src: src},
		Dir("/dev", 0o755), Dir("/proc", 0o755), Dir("/sys", 0o755), Dir("/etc", 0o755),
		Dir("/tmp", os.ModeSticky|0o777),
		{Path: "/etc/hosts", Mode: 0o644}, {Path: "/etc/resolv.conf", Mode: 0o644}, {Path: "/etc/hostname", Mode: 0o644},
	}, nil
}

func dirFiles(root string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f := File{Path: "/" + filepath.ToSlash(rel), Mode: info.Mode() & (os.ModePerm | os.ModeSticky)}
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			if f.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.IsDir():
			f.Mode |= os.ModeDir
		case info.Mode().IsRegular():
			f.Src = p
		default:
			return fmt.Errorf("%s: neither a file, a directory nor a symbolic link", p)
		}
		files = append(files, f)
		return nil
	})
	return files, err
}

var errNotTar = errors.New("not a tar")

func tarFiles(src string) ([]File, error) {
	fh, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	br := bufio.NewReader(fh)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		r = zr
	}
	tr := tar.NewReader(r)
	var files []File
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if len(files) == 0 {
				return nil, errNotTar
			}
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		p := path.Clean("/" + hdr.Name)
		if p == "/" {
			continue
		}
		f := File{Path: p, Mode: os.FileMode(hdr.Mode) & os.ModePerm}
		if hdr.Mode&0o1000 != 0 {
			f.Mode |= os.ModeSticky
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			f.Mode |= os.ModeDir
		case tar.TypeSymlink:
			f.Link = hdr.Linkname
		case tar.TypeReg:
			if f.Data, err = io.ReadAll(tr); err != nil {
				return nil, err
			}
			if f.Data == nil {
				f.Data = []byte{}
			}
		default:
			return nil, fmt.Errorf("%s: %s: tar entry type %q is not supported", src, hdr.Name, hdr.Typeflag)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, errNotTar
	}
	return files, nil
}
