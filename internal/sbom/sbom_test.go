package sbom

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// TestFromBuildInfo: every linked module is a library the application
// depends on, under its replacement when replaced, with its package URL;
// the JSON round-trips through cyclonedx-go's decoder.
func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/sandprobe/sandprobe", Version: "(devel)"},
		Deps: []*debug.Module{
			{Path: "k8s.io/client-go", Version: "v0.37.2", Sum: "h1:abc="},
			{Path: "example.com/old", Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.0.1"}},
		},
		Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"}, {Key: "-ldflags", Value: "-X secret"}},
	}
	bom := FromBuildInfo(bi, Options{Name: "sandprobe", Version: "v0.1.0", Created: time.Unix(1700000000, 0)})
	var buf bytes.Buffer
	if err := Write(&buf, bom); err != nil {
		t.Fatal(err)
	}
	var got cdx.BOM
	if err := cdx.NewBOMDecoder(&buf, cdx.BOMFileFormatJSON).Decode(&got); err != nil {
		t.Fatalf("decode the written BOM: %v", err)
	}
	if c := got.Metadata.Component; c.Name != "sandprobe" || c.Version != "v0.1.0" || c.PackageURL != "pkg:golang/github.com/sandprobe/sandprobe@v0.1.0" {
		t.Errorf("main component = %+v", c)
	}
	if got.Metadata.Timestamp != "2023-11-14T22:13:20Z" {
		t.Errorf("timestamp = %q, want the --created time", got.Metadata.Timestamp)
	}
	for _, p := range *got.Metadata.Component.Properties {
		if p.Name == "go:build:-ldflags" {
			t.Errorf("the BOM carries -ldflags (%q): only the platform and toolchain belong in it", p.Value)
		}
	}
	want := map[string]string{
		"k8s.io/client-go": "pkg:golang/k8s.io/client-go@v0.37.2",
		"example.com/fork": "pkg:golang/example.com/fork@v1.0.1",
	}
	if len(*got.Components) != len(want) {
		t.Fatalf("components = %+v, want %v", *got.Components, want)
	}
	for _, c := range *got.Components {
		if want[c.Name] != c.PackageURL || c.Type != cdx.ComponentTypeLibrary {
			t.Errorf("component %s: purl %q type %q, want %q library", c.Name, c.PackageURL, c.Type, want[c.Name])
		}
	}
	deps := *got.Dependencies
	if deps[0].Ref != got.Metadata.Component.BOMRef || len(*deps[0].Dependencies) != 2 {
		t.Errorf("the application depends on %+v, want both modules", deps[0])
	}
}

// TestFile reads a real binary: hack/sbom, built here, which links
// cyclonedx-go (a test binary records no modules).
func TestFile(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "sbom")
	cmd := exec.Command("go", "build", "-trimpath", "-o", exe, "../../hack/sbom")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build hack/sbom: %v\n%s", err, out)
	}
	bom, err := File(exe, Options{Version: "v0.0.0-test"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range *bom.Components {
		found = found || (c.Name == cdxModule && c.Version != "")
	}
	if !found {
		t.Errorf("the BOM of %s lacks %s with a version", exe, cdxModule)
	}
	if h := bom.Metadata.Component.Hashes; h == nil || len((*h)[0].Value) != 64 {
		t.Errorf("the application has no SHA-256: %+v", h)
	}
	if _, err := File(os.DevNull, Options{}); err == nil {
		t.Errorf("File(%s) succeeded: want an error for a file with no build info", os.DevNull)
	}
}
