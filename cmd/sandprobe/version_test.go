package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/internal/version"
)

// TestVersion: `version` (and `--version`) prints the build on one line,
// `-o json` as an object; a bad -o is exit 2. A release stamps the values
// (internal/version's TestStamped, hack/release's test); here the binary
// is a test build: dev.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, stderr := runApp(t, "", args...)
		if code != 0 || !strings.HasPrefix(out, "sandprobe "+version.Get().Version+" (commit ") || !strings.HasSuffix(out, runtime.GOOS+"/"+runtime.GOARCH+")\n") {
			t.Errorf("%v: exit %d, %q %q", args, code, out, stderr)
		}
	}
	code, out, _ := runApp(t, "", "version", "-o", "json")
	var got version.Info
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.Version == "" || got.GoVersion != runtime.Version() {
		t.Errorf("version -o json: exit %d, %v: %q", code, err, out)
	}
	if code, _, stderr := runApp(t, "", "version", "-o", "yaml"); code != 2 || !strings.Contains(stderr, "-o: want text or json") {
		t.Errorf("version -o yaml: exit %d, %q", code, stderr)
	}
}
