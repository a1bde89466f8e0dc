// Package sbom writes a CycloneDX bill of materials of the Go modules in a
// built binary, from the build information the Go linker stored in it
// (debug/buildinfo): what was linked, not what go.mod lists, and nothing
// written by hand. make release writes one beside every binary.
package sbom

import (
	"crypto/sha256"
	"debug/buildinfo"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// Options say what the BOM is of: the binary's name and release version
// (the main module records "(devel)" when built from a checkout) and when
// (the commit's time in a release, so one commit gives one BOM).
type Options struct {
	Name    string
	Version string
	Created time.Time
}

// File reads the build information of the Go binary at path and returns
// its BOM, the binary's SHA-256 recorded on the main component.
func File(path string, o Options) (*cdx.BOM, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read build info of %s: %w", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("hash %s: %w", path, err)
	}
	if o.Name == "" {
		o.Name = filepath.Base(path)
	}
	bom := FromBuildInfo(bi, o)
	(*bom.Metadata.Component).Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: fmt.Sprintf("%x", h.Sum(nil))}}
	return bom, nil
}

// FromBuildInfo is the BOM of one build: the main module as the
// application, every linked module (after replace directives) as a library
// it depends on, with its Go package URL, and the Go toolchain and target
// platform as properties. Build info has no module graph, so every module
// is a direct dependency of the application.
func FromBuildInfo(bi *debug.BuildInfo, o Options) *cdx.BOM {
	version := o.Version
	if version == "" {
		version = bi.Main.Version
	}
	main := cdx.Component{
		BOMRef:     purl(bi.Main.Path, version),
		Type:       cdx.ComponentTypeApplication,
		Name:       o.Name,
		Version:    version,
		PackageURL: purl(bi.Main.Path, version),
	}
	props := []cdx.Property{{Name: "go:version", Value: bi.GoVersion}}
	for _, s := range bi.Settings {
		switch s.Key {
		case "GOOS", "GOARCH", "CGO_ENABLED", "vcs.revision", "vcs.time", "-trimpath":
			props = append(props, cdx.Property{Name: "go:build:" + s.Key, Value: s.Value})
		}
	}
	main.Properties = &props

	var libs []cdx.Component
	var refs []string
	for _, d := range bi.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		c := cdx.Component{
			BOMRef:     purl(m.Path, m.Version),
			Type:       cdx.ComponentTypeLibrary,
			Name:       m.Path,
			Version:    m.Version,
			PackageURL: purl(m.Path, m.Version),
		}
		if m.Sum != "" {
			c.Properties = &[]cdx.Property{{Name: "go:module:sum", Value: m.Sum}}
		}
		if d.Replace != nil {
			c.Description = "replaces " + d.Path + "@" + d.Version
		}
		libs = append(libs, c)
		refs = append(refs, c.BOMRef)
	}

	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{
		Component: &main,
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeLibrary, Name: cdxModule, Version: toolVersion(),
		}}},
	}
	if !o.Created.IsZero() {
		bom.Metadata.Timestamp = o.Created.UTC().Format(time.RFC3339)
	}
	bom.Components = &libs
	deps := []cdx.Dependency{{Ref: main.BOMRef, Dependencies: &refs}}
	for _, r := range refs {
		deps = append(deps, cdx.Dependency{Ref: r})
	}
	bom.Dependencies = &deps
	return bom
}

// Write encodes the BOM as indented JSON.
func Write(w io.Writer, bom *cdx.BOM) error {
	return cdx.NewBOMEncoder(w, cdx.BOMFileFormatJSON).SetPretty(true).Encode(bom)
}

const cdxModule = "github.com/CycloneDX/cyclonedx-go"

// toolVersion is the version of cyclonedx-go linked into this program.
func toolVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == cdxModule {
				return d.Version
			}
		}
	}
	return ""
}

// purl is a module's package URL (the purl spec's golang type), each path
// segment escaped.
func purl(path, version string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	p := "pkg:golang/" + strings.Join(segs, "/")
	if version != "" && version != "(devel)" {
		p += "@" + url.PathEscape(version)
	}
	return p
}
