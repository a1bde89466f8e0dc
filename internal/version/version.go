// Package version is what the build stamped into the binary: the release
// version, the commit it was built from and when (make build and make
// release set them with -ldflags -X; see the Makefile's STAMP). Every
// report carries them (JSON, JUnit, SARIF, sandprobe_info), so a finding
// can always be traced to the build that made it.
//
// Standard library only: the probe binary links it.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the linker: -X github.com/sandprobe/sandprobe/internal/version.version=v0.1.0
// (and .commit, .date). Unset in a plain `go build` or `go test`.
var (
	version string
	commit  string
	date    string
)

// Dev is the version of a build nobody stamped.
const Dev = "dev"

// Info describes one build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Date      string `json:"buildDate,omitempty"` // RFC 3339, UTC: the commit's time in a release (SOURCE_DATE_EPOCH)
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// Get returns this binary's build. Unstamped, the version falls back to the
// module version `go install …@vX.Y.Z` records, then to "dev"; the commit
// to the VCS revision Go records when it builds inside a checkout.
func Get() Info {
	i := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if i.Version == "" && ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		i.Version = bi.Main.Version
	}
	if i.Version == "" {
		i.Version = Dev
	}
	if ok && (i.Commit == "" || i.Date == "") {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && i.Commit == "":
				i.Commit = s.Value
			case s.Key == "vcs.time" && i.Date == "":
				i.Date = s.Value
			}
		}
	}
	return i
}

// String is one line for `version` commands and logs:
// "v0.1.0 (commit 0123abcd…, built 2026-01-02T03:04:05Z, go1.26.8 linux/amd64)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s %s)", i.Version, orUnknown(i.Commit), orUnknown(i.Date), i.GoVersion, i.Platform)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
