package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

var epoch = time.Unix(1767225600, 0).UTC() // 2026-01-01T00:00:00Z

// binDirs writes stand-in binaries for two platforms under root, with the
// given file mode and modification time (which must not matter).
func binDirs(t *testing.T, root string, mode os.FileMode, mtime time.Time) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		dir := filepath.Join(root, strings.ReplaceAll(p, "/", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range Binaries {
			f := filepath.Join(dir, b)
			if err := os.WriteFile(f, []byte("#!/static "+b+" for "+p+"\n"), mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(f, mode)
			os.Chtimes(f, mtime, mtime)
		}
		dirs[p] = dir
	}
	return dirs
}

func caBundle(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "ca.crt")
	os.WriteFile(p, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o600)
	return p
}

// build builds the image into out and returns the index's digest, the
// archive's bytes and the index.
func build(t *testing.T, o SandprobeOptions, out string) (string, []byte, v1.ImageIndex) {
	t.Helper()
	spec, err := Sandprobe(o)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(out, "oci")
	if err := WriteLayout(dir, idx, "ghcr.io/sandprobe/sandprobe:v0.1.0"); err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if err := WriteArchive(&archive, dir, idx, "ghcr.io/sandprobe/sandprobe:v0.1.0", "linux/amd64", o.Created); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String(), archive.Bytes(), idx
}

// TestReproducible: the same binaries and time give the same index digest
// and the same archive, byte for byte, whatever the files' modes, times,
// owners and the umask; another build time gives another digest.
func TestReproducible(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	labels := map[string]string{"org.opencontainers.image.version": "v0.1.0", "org.opencontainers.image.revision": "abc"}
	oa := SandprobeOptions{Created: epoch, BinDirs: binDirs(t, a, 0o755, time.Now()), CABundle: caBundle(t, a), Labels: labels}
	old := syscall.Umask(0o077)
	ob := SandprobeOptions{Created: epoch, BinDirs: binDirs(t, b, 0o700, time.Unix(12345, 0)), CABundle: caBundle(t, b), Labels: labels}
	da, archA, _ := build(t, oa, a)
	db, archB, _ := build(t, ob, b)
	syscall.Umask(old)
	if da != db {
		t.Errorf("two builds of the same binaries: %s and %s", da, db)
	}
	if !bytes.Equal(archA, archB) {
		t.Errorf("the archives differ (%d and %d bytes)", len(archA), len(archB))
	}
	later := oa
	later.Created = epoch.Add(time.Second)
	if dl, _, _ := build(t, later, t.TempDir()); dl == da {
		t.Errorf("another build time gave the same digest %s", dl)
	}
	changed := t.TempDir()
	oc := oa
	oc.BinDirs = binDirs(t, changed, 0o755, time.Now())
	os.WriteFile(filepath.Join(oc.BinDirs["linux/arm64"], "sandprobe-probe"), []byte("another binary"), 0o755)
	if dc, _, _ := build(t, oc, changed); dc == da {
		t.Errorf("another binary gave the same digest %s", dc)
	}
}

// layerEntries reads a layer's tar headers and contents.
func layerEntries(t *testing.T, l v1.Layer) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var hdrs []*tar.Header
	data := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, h)
		b, _ := io.ReadAll(tr)
		data[h.Name] = b
	}
	return hdrs, data
}

// TestContents: an index of linux/amd64 and linux/arm64, each image
// running as 65532:65532 with /sandprobe as its entrypoint, holding both
// binaries (0755) and the CA bundle (0644) in layers whose entries are
// sorted, owned by root and stamped with the build time.
func TestContents(t *testing.T) {
	dir := t.TempDir()
	o := SandprobeOptions{Created: epoch, BinDirs: binDirs(t, dir, 0o700, time.Now()), CABundle: caBundle(t, dir),
		Extra: []File{{Path: "/etc/sandprobe-lab/ca.pem", Mode: 0o644, Data: []byte("lab CA")}}}
	_, _, idx := build(t, o, dir)
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != "application/vnd.oci.image.index.v1+json" || len(im.Manifests) != 2 {
		t.Fatalf("index: %s with %d manifests", im.MediaType, len(im.Manifests))
	}
	var sharedDigest v1.Hash
	for i, want := range []string{"linux/amd64", "linux/arm64"} {
		d := im.Manifests[i]
		if got := d.Platform.OS + "/" + d.Platform.Architecture; got != want {
			t.Fatalf("manifest %d is %s, want %s", i, got, want)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != "/sandprobe" || !cf.Created.Time.Equal(epoch) {
			t.Errorf("%s config: user %q, entrypoint %v, created %s", want, cf.Config.User, cf.Config.Entrypoint, cf.Created)
		}
		for _, h := range cf.History {
			if !h.Created.Time.Equal(epoch) {
				t.Errorf("%s history %q created %s", want, h.CreatedBy, h.Created)
			}
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(layers) != 3 {
			t.Fatalf("%s: %d layers, want base, extra, binaries", want, len(layers))
		}
		if ld, _ := layers[0].Digest(); i == 0 {
			sharedDigest = ld
		} else if ld != sharedDigest {
			t.Errorf("the base layer differs between platforms: %s and %s", sharedDigest, ld)
		}
		files, contents := imageFiles(t, want, layers)
		for name, mode := range map[string]int64{
			"sandprobe": 0o755, "sandprobe-probe": 0o755, "etc/ssl/certs/ca-certificates.crt": 0o644,
			"etc/passwd": 0o644, "etc/group": 0o644, "tmp/": 0o1777, "etc/sandprobe-lab/ca.pem": 0o644, "etc/hosts": 0o644,
		} {
			h, ok := files[name]
			if !ok {
				t.Errorf("%s: no %s in the image", want, name)
				continue
			}
			if h.Mode != mode {
				t.Errorf("%s: %s has mode %o, want %o", want, name, h.Mode, mode)
			}
		}
		if got := string(contents["sandprobe-probe"]); got != "#!/static sandprobe-probe for "+want+"\n" {
			t.Errorf("%s: /sandprobe-probe is %q: the wrong platform's binary", want, got)
		}
		if !strings.Contains(string(contents["etc/passwd"]), "nonroot:x:65532:65532:") {
			t.Errorf("%s: /etc/passwd has no nonroot: %q", want, contents["etc/passwd"])
		}
	}
}

// imageFiles reads every layer's entries (checking each layer's media
// type, the entries' order, owner and time) into the image's files by
// name, and their contents.
func imageFiles(t *testing.T, want string, layers []v1.Layer) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	files := map[string]*tar.Header{}
	contents := map[string][]byte{}
	for _, l := range layers {
		if mt, _ := l.MediaType(); mt != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Errorf("layer media type %s", mt)
		}
		hdrs, data := layerEntries(t, l)
		var names []string
		for _, h := range hdrs {
			names = append(names, h.Name)
			files[h.Name] = h
			if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(epoch) {
				t.Errorf("%s %s: owner %d:%d (%q:%q), time %s", want, h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
			}
		}
		if !sort.StringsAreSorted(names) {
			t.Errorf("%s: layer entries not sorted: %v", want, names)
		}
		for k, v := range data {
			contents[k] = v
		}
	}
	return files, contents
}

// TestArchive: the archive holds the OCI layout ctr images import reads
// (index.json naming the image for containerd) and the manifest.json
// docker load reads, whose config and layers are blobs of the archive
// with the digests they are named after.
func TestArchive(t *testing.T) {
	dir := t.TempDir()
	o := SandprobeOptions{Created: epoch, BinDirs: binDirs(t, dir, 0o755, time.Now()), CABundle: caBundle(t, dir)}
	digest, archive, _ := build(t, o, dir)
	entries := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		entries[h.Name] = b
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(entries["index.json"], &index); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Digest.String() != digest ||
		index.Manifests[0].Annotations[AnnotationContainerdName] != "ghcr.io/sandprobe/sandprobe:v0.1.0" ||
		index.Manifests[0].Annotations[AnnotationRefName] != "v0.1.0" {
		t.Errorf("index.json: %s", entries["index.json"])
	}
	if _, ok := entries["oci-layout"]; !ok {
		t.Error("no oci-layout")
	}
	var dm []dockerManifest
	if err := json.Unmarshal(entries["manifest.json"], &dm); err != nil || len(dm) != 1 {
		t.Fatalf("manifest.json: %v %s", err, entries["manifest.json"])
	}
	if len(dm[0].RepoTags) != 1 || dm[0].RepoTags[0] != "ghcr.io/sandprobe/sandprobe:v0.1.0" || len(dm[0].Layers) != 2 {
		t.Errorf("manifest.json: %+v", dm[0])
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(entries[dm[0].Config], &cfg); err != nil || cfg.Architecture != "amd64" {
		t.Errorf("manifest.json's config %s: %v, architecture %q", dm[0].Config, err, cfg.Architecture)
	}
	for _, p := range append([]string{dm[0].Config}, dm[0].Layers...) {
		b, ok := entries[p]
		sum := sha256.Sum256(b)
		if !ok || "blobs/sha256/"+hex.EncodeToString(sum[:]) != p {
			t.Errorf("%s: in the archive %v, its digest sha256:%x", p, ok, sum)
		}
	}
	// The layout on disk reads back as the same index.
	p, err := layout.FromPath(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	if im, err := ii.IndexManifest(); err != nil || im.Manifests[0].Digest.String() != digest {
		t.Errorf("layout's index: %v, %v", im, err)
	}
}

// TestBadInput: what cannot make an image says so, naming what is wrong.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	good := SandprobeOptions{Created: epoch, BinDirs: binDirs(t, dir, 0o755, time.Now()), CABundle: caBundle(t, dir)}
	empty := filepath.Join(dir, "empty.crt")
	os.WriteFile(empty, nil, 0o644)
	for name, tc := range map[string]struct {
		o    SandprobeOptions
		want string
	}{
		"no CA bundle":    {SandprobeOptions{Created: epoch, BinDirs: good.BinDirs, CABundle: filepath.Join(dir, "none.crt")}, "CA bundle: stat"},
		"empty CA bundle": {SandprobeOptions{Created: epoch, BinDirs: good.BinDirs, CABundle: empty}, "is empty"},
		"no binaries":     {SandprobeOptions{Created: epoch, BinDirs: map[string]string{"linux/amd64": t.TempDir()}, CABundle: good.CABundle}, "linux/amd64: stat"},
		"bad platform":    {SandprobeOptions{Created: epoch, BinDirs: map[string]string{"amd64": good.BinDirs["linux/amd64"]}, CABundle: good.CABundle}, `platform "amd64"`},
	} {
		if _, err := Sandprobe(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	if _, err := LayerTar([]File{{Path: "relative"}}, epoch); err == nil {
		t.Error("a relative path was accepted")
	}
	if _, err := LayerTar([]File{{Path: "/a"}, {Path: "/a/b"}}, epoch); err == nil {
		t.Error("a file below a file was accepted")
	}
}

func TestNormalizeRef(t *testing.T) {
	for in, want := range map[string]string{
		"probe:1":                              "docker.io/library/probe:1",
		"probe":                                "docker.io/library/probe:latest",
		"me/probe:2":                           "docker.io/me/probe:2",
		"sandprobe.local/sandprobe:e2e":        "sandprobe.local/sandprobe:e2e",
		"localhost/x":                          "localhost/x:latest",
		"registry:5000/x":                      "registry:5000/x:latest",
		"ghcr.io/sandprobe/sandprobe@sha256:0": "ghcr.io/sandprobe/sandprobe:latest",
	} {
		if got := NormalizeRef(in); got != want {
			t.Errorf("NormalizeRef(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRootFS: a directory, a tar and one executable become the same kind
// of file list; symbolic links stay links.
func TestRootFS(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("tool"), 0o755)
	os.Symlink("usr/bin", filepath.Join(root, "bin"))
	files, err := RootFS(root)
	if err != nil {
		t.Fatal(err)
	}
	data, err := LayerTar(files, epoch)
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(dir, "root.tar")
	os.WriteFile(tarPath, data, 0o644)
	fromTar, err := RootFS(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LayerTar(fromTar, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, again) {
		t.Error("a directory and its tar make different layers")
	}
	var link bool
	for _, f := range files {
		if f.Path == "/bin" && f.Link == "usr/bin" {
			link = true
		}
	}
	if !link {
		t.Errorf("no /bin -> usr/bin link in %+v", files)
	}
	exe := filepath.Join(dir, "probe")
	os.WriteFile(exe, []byte("\x7fELF not a tar, and executable"), 0o755)
	one, err := RootFS(exe)
	if err != nil {
		t.Fatal(err)
	}
	if one[0].Path != "/probe" || one[0].Mode != 0o755 {
		t.Errorf("an executable becomes %+v", one[0])
	}
	notExe := filepath.Join(dir, "notes.txt")
	os.WriteFile(notExe, []byte("plain text"), 0o644)
	if _, err := RootFS(notExe); err == nil || !strings.Contains(err.Error(), "neither a directory, a tar file nor an executable") {
		t.Errorf("a plain file: %v", err)
	}
}
