package image

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations of index.json's entry: containerd's `ctr images import`
// names the image after the first, OCI tools after the second.
const (
	AnnotationContainerdName = "io.containerd.image.name"
	AnnotationRefName        = "org.opencontainers.image.ref.name"
)

// NormalizeRef spells ref the way the CRI stores it, so a pod may name the
// image as written: a first path component without '.' or ':' (and not
// localhost) means Docker Hub, a single component means library/, and no
// tag means :latest (probe:1 -> docker.io/library/probe:1).
func NormalizeRef(ref string) string {
	name := ref
	if at := strings.Index(name, "@"); at >= 0 {
		name = name[:at]
	}
	if last := name[strings.LastIndex(name, "/")+1:]; !strings.Contains(last, ":") {
		name += ":latest"
	}
	first, _, hasSlash := strings.Cut(name, "/")
	switch {
	case !hasSlash:
		name = "docker.io/library/" + name
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		name = "docker.io/" + name
	}
	return name
}

// WriteLayout writes idx as an OCI image layout in dir (created, or
// emptied first), its index.json entry named ref.
func WriteLayout(dir string, idx v1.ImageIndex, ref string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write OCI layout %s: %w", dir, err)
	}
	full := NormalizeRef(ref)
	tag := full[strings.LastIndex(full, ":")+1:]
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		AnnotationContainerdName: full, AnnotationRefName: tag,
	})); err != nil {
		return fmt.Errorf("write OCI layout %s: %w", dir, err)
	}
	return nil
}

// dockerManifest is one entry of the manifest.json `docker load` reads.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// WriteArchive writes the OCI layout in dir as one tar to w, with a
// manifest.json naming the platform image `docker load` takes (Docker
// loads one image per tag; `ctr images import` reads the whole layout).
// Entries are sorted, owned by 0:0 and timestamped created: the same
// layout gives the same bytes.
func WriteArchive(w io.Writer, dir string, idx v1.ImageIndex, ref, platform string, created time.Time) error {
	dm, err := dockerEntry(idx, ref, platform)
	if err != nil {
		return err
	}
	manifestJSON, err := json.Marshal([]dockerManifest{dm})
	if err != nil {
		return err
	}
	var paths []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	mtime := created.UTC().Truncate(time.Second)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: mtime, Format: tar.FormatPAX}
		if fi.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	hdr := &tar.Header{Name: "manifest.json", Mode: 0o644, ModTime: mtime, Typeflag: tar.TypeReg, Size: int64(len(manifestJSON)), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := tw.Write(manifestJSON); err != nil {
		return err
	}
	return tw.Close()
}

// dockerEntry is manifest.json's entry for platform ("linux/amd64"): its
// config and layers as paths of the layout's blobs.
func dockerEntry(idx v1.ImageIndex, ref, platform string) (dockerManifest, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return dockerManifest{}, err
	}
	var have []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			continue
		}
		p := d.Platform.OS + "/" + d.Platform.Architecture
		have = append(have, p)
		if p != platform {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return dockerManifest{}, err
		}
		m, err := img.Manifest()
		if err != nil {
			return dockerManifest{}, err
		}
		dm := dockerManifest{Config: blobPath(m.Config.Digest), RepoTags: []string{ref}}
		for _, l := range m.Layers {
			dm.Layers = append(dm.Layers, blobPath(l.Digest))
		}
		return dm, nil
	}
	return dockerManifest{}, fmt.Errorf("no %s image in the index (it has %s)", platform, strings.Join(have, ", "))
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
