package render_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/render"
)

// TestProxyAllowListInTinyproxy: the allow-list render writes, loaded by a
// real tinyproxy (FilterType ere, FilterDefaultDeny Yes), refuses exactly
// the names its rule does not match. tinyproxy and curl run in a network
// namespace of their own with only loopback, so an allowed name's upstream
// lookup fails at once and nothing leaves the machine.
func TestProxyAllowListInTinyproxy(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"tinyproxy", "curl", "unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool+" is not installed (make deps)")
		}
	}
	cases := []struct {
		host  string
		names []string
	}{
		{"api.example.com", []string{"api.example.com", "API.example.com", "xapi.example.com", "a.api.example.com", "api.example.com.evil.test", "example.com"}},
		{"*.github.com", []string{"api.github.com", "a.b.github.com", "github.com", "evilgithub.com", "github.com.evil.test", "api.github.com.evil.test"}},
	}
	dir := t.TempDir()
	var script bytes.Buffer
	script.WriteString("set -e\nip link set lo up\n")
	type probe struct{ host, name string }
	var probes []probe
	for i, c := range cases {
		p, err := policyAllowing(c.host)
		if err != nil {
			t.Fatal(err)
		}
		var filter bytes.Buffer
		if err := render.WriteProxyAllowList(&filter, p); err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(dir, fmt.Sprintf("tinyproxy-%d.conf", i))
		filterFile := filepath.Join(dir, fmt.Sprintf("filter-%d", i))
		if err := os.WriteFile(filterFile, filter.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		port := 18300 + i
		cfg := fmt.Sprintf("Port %d\nListen 127.0.0.1\nTimeout 5\nMaxClients 16\nAllow 127.0.0.1\nConnectPort 443\nFilter \"%s\"\nFilterType ere\nFilterDefaultDeny Yes\nLogLevel Critical\n", port, filterFile)
		if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&script, "tinyproxy -d -c %s >/dev/null 2>&1 &\npids=\"$pids $!\"\n", conf)
		fmt.Fprintf(&script, "for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:%d/ && break || sleep 0.1; done\n", port)
		for _, n := range c.names {
			probes = append(probes, probe{c.host, n})
			// -w prints the proxy's answer to the CONNECT.
			fmt.Fprintf(&script, "echo \"%s %s $(curl -s -o /dev/null -w '%%{http_connect}' --max-time 5 -x http://127.0.0.1:%d https://%s/ || true)\"\n", c.host, n, port, n)
		}
	}
	// By pid: a non-interactive sh has no job table for jobs -p to list.
	script.WriteString("kill $pids 2>/dev/null || true\nwait\n")
	out, err := exec.Command("unshare", "--net", "--", "sh", "-c", script.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	answers := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 {
			answers[f[0]+" "+f[1]] = f[2]
		}
	}
	t.Logf("CONNECT answers:\n%s", out)
	for _, pr := range probes {
		code, ok := answers[pr.host+" "+pr.name]
		if !ok {
			t.Fatalf("no answer for %s through %s's allow-list:\n%s", pr.name, pr.host, out)
		}
		filtered := code == "403"
		if want := !writtenMatches(pr.host, pr.name); filtered != want {
			t.Errorf("rule %s, name %s: tinyproxy answered the CONNECT with %s (filtered %v), want filtered %v", pr.host, pr.name, code, filtered, want)
		}
	}
}
