// Package image builds sandprobe's OCI image in code, with
// go-containerregistry and no Docker daemon: both static binaries on an
// empty base, non-root (65532:65532), the CA bundle, one image per
// platform under one index. It is reproducible: every tar entry is sorted,
// owned by 0:0 with a fixed mode and the build's timestamp
// (SOURCE_DATE_EPOCH), every config and history entry carries that same
// time, so two builds from the same binaries give the same digest.
//
// It writes the index as an OCI image layout (a directory) and as one tar
// that `ctr images import` (the OCI layout, named by annotation) and
// `docker load` (its manifest.json, for one platform) both accept.
// hack/image is the command (make image); hack/cluster/import-image.sh
// uses it too for the test cluster's single-platform images.
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the image's user and group: the distroless "nonroot" ids,
// the same the reference policy declares for sandboxes.
const NonRoot = 65532

// File is one entry of a layer.
type File struct {
	Path string      // absolute path in the image
	Mode os.FileMode // permission bits (and sticky); os.ModeDir for a directory
	// Src is a host file to copy, or Data the content itself (a file with
	// neither is empty).
	Src  string
	Data []byte
	// Link, when set, makes the entry a symbolic link to it.
	Link string
}

// Dir is a directory entry.
func Dir(p string, perm os.FileMode) File { return File{Path: p, Mode: os.ModeDir | perm} }

// Layer is a named set of files: what one layer of the image holds.
type Layer struct {
	// CreatedBy says where the layer comes from, in the image's history.
	CreatedBy string
	Files     []File
}

// Platform is one image of the index: its OS/architecture and the layers
// only it has (the binaries), above the layers every platform shares.
type Platform struct {
	OS, Arch string
	Layers   []Layer
}

// Spec is the whole image.
type Spec struct {
	// Created is the build's time (SOURCE_DATE_EPOCH): every tar entry,
	// the config and the history carry it, nothing carries the clock.
	Created time.Time
	// Shared layers come first in every platform's image (the CA bundle,
	// /etc/passwd, mount points); identical bytes, one blob.
	Shared    []Layer
	Platforms []Platform
	// Config of every image; Labels also become the index's annotations.
	User       string
	Entrypoint []string
	Env        []string
	Labels     map[string]string
}

// Build makes the index. Nothing is written anywhere.
func Build(s Spec) (v1.ImageIndex, error) {
	if len(s.Platforms) == 0 {
		return nil, fmt.Errorf("no platform")
	}
	created := v1.Time{Time: s.Created.UTC()}
	shared := make([]mutate.Addendum, 0, len(s.Shared))
	for _, l := range s.Shared {
		add, err := addendum(l, s.Created)
		if err != nil {
			return nil, err
		}
		shared = append(shared, add)
	}
	var adds []mutate.IndexAddendum
	seen := map[string]bool{}
	for _, p := range s.Platforms {
		if p.OS == "" || p.Arch == "" {
			return nil, fmt.Errorf("platform %q/%q: want an OS and an architecture", p.OS, p.Arch)
		}
		if seen[p.OS+"/"+p.Arch] {
			return nil, fmt.Errorf("platform %s/%s twice", p.OS, p.Arch)
		}
		seen[p.OS+"/"+p.Arch] = true
		layers := append([]mutate.Addendum(nil), shared...)
		for _, l := range p.Layers {
			add, err := addendum(l, s.Created)
			if err != nil {
				return nil, fmt.Errorf("%s/%s: %w", p.OS, p.Arch, err)
			}
			layers = append(layers, add)
		}
		img, err := mutate.Append(empty.Image, layers...)
		if err != nil {
			return nil, err
		}
		img = mutate.MediaType(img, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture, cf.Created = p.OS, p.Arch, created
		cf.Config = v1.Config{User: s.User, Entrypoint: s.Entrypoint, Env: s.Env, Labels: s.Labels, WorkingDir: "/"}
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch},
		}})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	if len(s.Labels) > 0 {
		idx = mutate.Annotations(idx, s.Labels).(v1.ImageIndex)
	}
	return idx, nil
}

// addendum makes a layer and its history entry.
func addendum(l Layer, created time.Time) (mutate.Addendum, error) {
	data, err := LayerTar(l.Files, created)
	if err != nil {
		return mutate.Addendum{}, fmt.Errorf("layer %s: %w", l.CreatedBy, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return mutate.Addendum{}, err
	}
	return mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: created.UTC()}, CreatedBy: l.CreatedBy, Comment: "sandprobe internal/image",
	}}, nil
}

// LayerTar is the uncompressed tar of files: every parent directory
// present, entries sorted by path, owned by 0:0 with no names, modes as
// given, each timestamped created. The same files give the same bytes,
// whatever the host's clock, umask, owners or file times.
func LayerTar(files []File, created time.Time) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		p := path.Clean(f.Path)
		if !path.IsAbs(p) || p == "/" {
			return nil, fmt.Errorf("%q: want an absolute path below /", f.Path)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("%s: listed twice", p)
		}
		f.Path = p
		byPath[p] = f
	}
	// Parents not listed are plain 0755 directories.
	for p := range byPath {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if f, ok := byPath[d]; ok {
				if !f.Mode.IsDir() || f.Link != "" {
					return nil, fmt.Errorf("%s: its parent %s is a file", p, d)
				}
				continue
			}
			byPath[d] = Dir(d, 0o755)
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := created.UTC().Truncate(time.Second)
	for _, p := range paths {
		f := byPath[p]
		name := strings.TrimPrefix(p, "/")
		hdr := &tar.Header{Name: name, Mode: int64(f.Mode.Perm()), ModTime: mtime, Format: tar.FormatPAX}
		if f.Mode&os.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		switch {
		case f.Link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			continue
		case f.Mode.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			continue
		}
		data := f.Data
		if f.Src != "" {
			var err error
			if data, err = os.ReadFile(f.Src); err != nil {
				return nil, err
			}
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Derive appends one layer (and labels) to every image of base: what an
// organisation does to add its CA or tools to the sandprobe image, and
// what make e2e does to bake the lab's CA in. The platforms stay, each
// image's config and history gain the layer, stamped created.
func Derive(base v1.ImageIndex, extra Layer, labels map[string]string, created time.Time) (v1.ImageIndex, error) {
	im, err := base.IndexManifest()
	if err != nil {
		return nil, err
	}
	add, err := addendum(extra, created)
	if err != nil {
		return nil, err
	}
	var adds []mutate.IndexAddendum
	for _, d := range im.Manifests {
		img, err := base.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", d.Digest, err)
		}
		if img, err = mutate.Append(img, add); err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		cf = cf.DeepCopy()
		cf.Created = v1.Time{Time: created.UTC()}
		if len(labels) > 0 && cf.Config.Labels == nil {
			cf.Config.Labels = map[string]string{}
		}
		for k, v := range labels {
			cf.Config.Labels[k] = v
		}
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: d.Platform}})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	anns := map[string]string{}
	for k, v := range im.Annotations {
		anns[k] = v
	}
	for k, v := range labels {
		anns[k] = v
	}
	if len(anns) > 0 {
		idx = mutate.Annotations(idx, anns).(v1.ImageIndex)
	}
	return idx, nil
}
