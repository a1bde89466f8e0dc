// Command image builds OCI images in code (internal/image, on
// go-containerregistry): no Docker daemon, no registry.
//
//	go run ./hack/image build --out DIR --name REF --platform linux/amd64=BINDIR [--platform …]
//	    [--created UNIX] [--ca-bundle FILE] [--label K=V]… [--add SRC:DST]… [--load-platform OS/ARCH]
//	  sandprobe's image (make image, hack/image.sh): DIR/oci (OCI layout),
//	  DIR/image.tar (ctr images import, docker load) and DIR/digest (the
//	  index's digest, also printed).
//
//	go run ./hack/image derive --from LAYOUT --out DIR --name REF [--created UNIX] [--label K=V]… --add SRC:DST…
//	  LAYOUT's images (an OCI layout, make image's DIR/oci) with one more
//	  layer of files on top, written as build writes: an image of your own
//	  on sandprobe's (the e2e's, with the lab's CA).
//
//	go run ./hack/image rootfs --name REF --out TAR [--created UNIX] SRC [ENTRYPOINT…]
//	  a one-layer image of this host's platform from SRC (a directory, a tar
//	  or one executable file, which becomes /NAME), for the test cluster's
//	  images (hack/cluster/import-image.sh).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/sandprobe/sandprobe/internal/image"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

// list is a repeatable flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{fmt.Errorf("want a subcommand: build, derive or rootfs")}
	}
	switch args[0] {
	case "build":
		return build(args[1:], stdout)
	case "derive":
		return derive(args[1:], stdout)
	case "rootfs":
		return rootfs(args[1:], stdout)
	}
	return usageError{fmt.Errorf("unknown subcommand %q: want build, derive or rootfs", args[0])}
}

// created parses --created (seconds since the epoch, SOURCE_DATE_EPOCH).
func created(v string) (time.Time, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, usageError{fmt.Errorf("--created: want seconds since 1970 (SOURCE_DATE_EPOCH), got %q", v)}
	}
	return time.Unix(n, 0).UTC(), nil
}

func build(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	out := fs.String("out", "out/image", "output directory")
	name := fs.String("name", "", "the image reference the archive is named after (ctr images import, docker load)")
	createdAt := fs.String("created", "0", "the build's time, seconds since 1970 (SOURCE_DATE_EPOCH: the commit's time)")
	ca := fs.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the CA certificates file to install")
	load := fs.String("load-platform", "linux/"+runtime.GOARCH, "the platform docker load takes from the archive")
	var platforms, labels, adds list
	fs.Var(&platforms, "platform", "OS/ARCH=DIR: a platform and the directory holding its sandprobe and sandprobe-probe (repeatable)")
	fs.Var(&labels, "label", "K=V: an OCI label (repeatable)")
	fs.Var(&adds, "add", "SRC:DST: one more file, mode 0644, in a layer above the rest (repeatable)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *name == "" || len(platforms) == 0 || fs.NArg() > 0 {
		return usageError{fmt.Errorf("build: want --name and at least one --platform, and no arguments")}
	}
	t, err := created(*createdAt)
	if err != nil {
		return err
	}
	o := image.SandprobeOptions{Created: t, BinDirs: map[string]string{}, CABundle: *ca}
	for _, p := range platforms {
		plat, dir, ok := strings.Cut(p, "=")
		if !ok {
			return usageError{fmt.Errorf("--platform %q: want OS/ARCH=DIR", p)}
		}
		o.BinDirs[plat] = dir
	}
	if o.Labels, err = parseLabels(labels); err != nil {
		return err
	}
	if o.Extra, err = parseAdds(adds); err != nil {
		return err
	}
	spec, err := image.Sandprobe(o)
	if err != nil {
		return err
	}
	return write(spec, *out, *name, *load, stdout)
}

func parseLabels(labels []string) (map[string]string, error) {
	m := map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--label %q: want K=V", l)}
		}
		m[k] = v
	}
	return m, nil
}

func parseAdds(adds []string) ([]image.File, error) {
	var files []image.File
	for _, a := range adds {
		src, dst, ok := strings.Cut(a, ":")
		if !ok || !filepath.IsAbs(dst) {
			return nil, usageError{fmt.Errorf("--add %q: want SRC:/ABSOLUTE/DST", a)}
		}
		if _, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("--add %q: %w", a, err)
		}
		files = append(files, image.File{Path: dst, Mode: 0o644, Src: src})
	}
	return files, nil
}

func derive(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("derive", flag.ContinueOnError)
	from := fs.String("from", "out/image/oci", "the OCI layout to start from")
	out := fs.String("out", "", "output directory")
	name := fs.String("name", "", "the image reference the archive is named after")
	createdAt := fs.String("created", "0", "the new layer's time, seconds since 1970")
	load := fs.String("load-platform", "linux/"+runtime.GOARCH, "the platform docker load takes from the archive")
	var labels, adds list
	fs.Var(&labels, "label", "K=V: an OCI label (repeatable)")
	fs.Var(&adds, "add", "SRC:DST: a file, mode 0644, in the new layer (repeatable)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *out == "" || *name == "" || len(adds) == 0 || fs.NArg() > 0 {
		return usageError{fmt.Errorf("derive: want --out, --name and at least one --add, and no arguments")}
	}
	t, err := created(*createdAt)
	if err != nil {
		return err
	}
	l, err := parseLabels(labels)
	if err != nil {
		return err
	}
	files, err := parseAdds(adds)
	if err != nil {
		return err
	}
	p, err := layout.FromPath(*from)
	if err != nil {
		return fmt.Errorf("--from %s: %w", *from, err)
	}
	base, err := p.ImageIndex()
	if err != nil {
		return err
	}
	// The layout's index.json holds one entry: the image index make image wrote.
	im, err := base.IndexManifest()
	if err != nil {
		return err
	}
	if len(im.Manifests) != 1 {
		return fmt.Errorf("--from %s: want one image index in index.json, got %d entries", *from, len(im.Manifests))
	}
	inner, err := base.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		return err
	}
	idx, err := image.Derive(inner, image.Layer{CreatedBy: "derived: " + strings.Join(adds, " "), Files: files}, l, t)
	if err != nil {
		return err
	}
	return writeIndex(idx, t, *out, *name, *load, stdout)
}

// write builds spec and writes the layout, the archive and the digest
// file into out, then prints the digest of the index and of each image.
func write(spec image.Spec, out, name, loadPlatform string, stdout io.Writer) error {
	idx, err := image.Build(spec)
	if err != nil {
		return err
	}
	return writeIndex(idx, spec.Created, out, name, loadPlatform, stdout)
}

func writeIndex(idx v1.ImageIndex, created time.Time, out, name, loadPlatform string, stdout io.Writer) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	layoutDir := filepath.Join(out, "oci")
	if err := image.WriteLayout(layoutDir, idx, name); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(out, ".image.tar-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := image.WriteArchive(tmp, layoutDir, idx, name, loadPlatform, created); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(out, "image.tar")); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "digest"), []byte(digest.String()+"\n"), 0o644); err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s  %s (index: %s)\n", digest, name, filepath.Join(out, "image.tar"))
	for _, m := range im.Manifests {
		fmt.Fprintf(stdout, "%s  %s/%s\n", m.Digest, m.Platform.OS, m.Platform.Architecture)
	}
	return nil
}

func rootfs(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("rootfs", flag.ContinueOnError)
	name := fs.String("name", "", "the image reference (normalized as the CRI does: probe:1 is docker.io/library/probe:1)")
	out := fs.String("out", "", "the archive to write")
	createdAt := fs.String("created", "0", "the build's time, seconds since 1970")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *name == "" || *out == "" || fs.NArg() < 1 {
		return usageError{fmt.Errorf("rootfs: want --name, --out and SRC [ENTRYPOINT…]")}
	}
	t, err := created(*createdAt)
	if err != nil {
		return err
	}
	files, err := image.RootFS(fs.Arg(0))
	if err != nil {
		return err
	}
	platform := "linux/" + runtime.GOARCH
	spec := image.Spec{
		Created:    t,
		Platforms:  []image.Platform{{OS: "linux", Arch: runtime.GOARCH, Layers: []image.Layer{{CreatedBy: "rootfs " + filepath.Base(fs.Arg(0)), Files: files}}}},
		Entrypoint: fs.Args()[1:],
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}
	dir, err := os.MkdirTemp(filepath.Dir(*out), ".rootfs-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := write(spec, dir, *name, platform, io.Discard); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, "image.tar"), *out); err != nil {
		return err
	}
	digest, err := os.ReadFile(filepath.Join(dir, "digest"))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s\n", image.NormalizeRef(*name), strings.TrimSpace(string(digest)))
	return nil
}
