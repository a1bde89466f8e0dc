package image

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Binaries are the two static binaries of one platform, at the paths the
// probe pods, the init container and the CronJob run
// (render.ImageBinary, render.ImageProbeBinary; docs/probe.md).
var Binaries = []string{"sandprobe", "sandprobe-probe"}

// SandprobeOptions describe one build of sandprobe's image.
type SandprobeOptions struct {
	Created time.Time
	// BinDirs maps "linux/amd64" to the directory holding that
	// platform's sandprobe and sandprobe-probe.
	BinDirs map[string]string
	// CABundle is the CA certificates file (Debian's ca-certificates
	// bundle on the build host), installed where Go and OpenSSL look
	// first: /etc/ssl/certs/ca-certificates.crt.
	CABundle string
	// Extra files in one more layer above the rest, for every platform
	// (the e2e bakes the lab's CA in this way, as an organisation bakes
	// its own into a derived image).
	Extra []File
	// Labels: OCI labels (org.opencontainers.image.*) of the config and
	// annotations of the index.
	Labels map[string]string
}

// CAPath is where the image keeps the CA bundle.
const CAPath = "/etc/ssl/certs/ca-certificates.crt"

// Sandprobe is the image's spec: an empty base; one shared layer with the
// CA bundle, the passwd and group files naming 65532 "nonroot", and the
// mount points a read-only root needs; one layer per platform with the two
// binaries; the user 65532:65532 and /sandprobe as the entrypoint.
func Sandprobe(o SandprobeOptions) (Spec, error) {
	if len(o.BinDirs) == 0 {
		return Spec{}, fmt.Errorf("no platform binaries")
	}
	if o.CABundle == "" {
		return Spec{}, fmt.Errorf("no CA bundle")
	}
	if fi, err := os.Stat(o.CABundle); err != nil {
		return Spec{}, fmt.Errorf("CA bundle: %w", err)
	} else if fi.Size() == 0 {
		return Spec{}, fmt.Errorf("CA bundle %s is empty", o.CABundle)
	}
	base := Layer{CreatedBy: "sandprobe base: CA certificates, passwd/group (65532 nonroot), mount points", Files: []File{
		{Path: CAPath, Mode: 0o644, Src: o.CABundle},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot))},
		{Path: "/etc/group", Mode: 0o644, Data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot))},
		// What the runtime mounts over, present so a read-only root
		// needs no mount point created in it.
		{Path: "/etc/hosts", Mode: 0o644}, {Path: "/etc/resolv.conf", Mode: 0o644}, {Path: "/etc/hostname", Mode: 0o644},
		Dir("/dev", 0o755), Dir("/proc", 0o555), Dir("/sys", 0o555),
		Dir("/tmp", os.ModeSticky|0o777),
		Dir("/home/nonroot", 0o755),
	}}
	s := Spec{
		Created:    o.Created,
		Shared:     []Layer{base},
		User:       fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		Entrypoint: []string{"/sandprobe"},
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + CAPath},
		Labels:     o.Labels,
	}
	if len(o.Extra) > 0 {
		s.Shared = append(s.Shared, Layer{CreatedBy: "extra files", Files: o.Extra})
	}
	for _, platform := range sortedKeys(o.BinDirs) {
		osName, arch, ok := strings.Cut(platform, "/")
		if !ok {
			return Spec{}, fmt.Errorf("platform %q: want OS/ARCH", platform)
		}
		var bins []File
		for _, b := range Binaries {
			src := filepath.Join(o.BinDirs[platform], b)
			if _, err := os.Stat(src); err != nil {
				return Spec{}, fmt.Errorf("%s: %w", platform, err)
			}
			bins = append(bins, File{Path: "/" + b, Mode: 0o755, Src: src})
		}
		s.Platforms = append(s.Platforms, Platform{OS: osName, Arch: arch, Layers: []Layer{{CreatedBy: "sandprobe binaries: /sandprobe, /sandprobe-probe", Files: bins}}})
	}
	return s, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
