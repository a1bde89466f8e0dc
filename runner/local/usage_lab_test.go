package local_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// tail returns what a file gained since size.
func tail(t *testing.T, path string, size int64) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) < size {
		t.Fatalf("%s shrank", path)
	}
	return b[size:]
}

func sizeOf(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// usageDoc is egress-usage's JSON report, the parts these tests read.
type usageDoc struct {
	EgressUsage struct {
		Allowances []struct {
			Host     string
			Port     int
			Requests int64
			Verdict  string
			Risk     string
		}
		Denied []struct {
			Sandbox, Host string
			Port          int
			Count         int64
		}
		WouldBlock []struct {
			Sandbox, Host string
			Port          int
			Count         int64
		}
	} `json:"egressUsage"`
	Findings []struct{ Check, Subject, Status, Actual, Fix string }
}

func egressUsage(t *testing.T, policyDoc string, logs ...string) usageDoc {
	t.Helper()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte(policyDoc), 0o644)
	args := []string{"egress-usage", "--policy", pol, "-o", "json"}
	for _, l := range logs {
		args = append(args, "--log", l)
	}
	out, err := exec.Command(testenv.Binary(t), args...).Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("egress-usage: %v\n%s", err, ee.Stderr)
	}
	var doc usageDoc
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("egress-usage JSON: %v\n%s", err, out)
	}
	return doc
}

// TestLabEgressUsage: an agent's traffic through the lab's proxy (curl in
// the sandbox, not the probe), read back from the proxy's real record
// together with an aged synthetic log. Under the lab's policy plus an
// allowance nobody uses and a wildcard over github.io, egress-usage names
// both with their reasons and counts the denied attempts; under a
// narrowed policy (the api only), the audit stage lists exactly the
// destinations the lab's own servers answered through the proxy that the
// narrowed policy does not allow.
func TestLabEgressUsage(t *testing.T) {
	script := testenv.Lab(t)
	served := filepath.Join(testenv.LabDir(), "served")
	ca := filepath.Join(testenv.LabDir(), "ca.pem")
	for _, flavour := range []string{"tinyproxy", "squid"} {
		t.Run(flavour, func(t *testing.T) {
			labCmd(t, script, "heal")
			labCmd(t, script, "proxy", flavour)
			log := proxyLog(flavour)
			logSize, apiSize, gitSize := sizeOf(log), sizeOf(filepath.Join(served, "srv-api.log")), sizeOf(filepath.Join(served, "srv-git.log"))
			urls := []string{"https://api.lab.test/", "https://api.lab.test/v1", "http://api.lab.test/health", "https://git.lab.test/repo.git", "https://objects.git.lab.test/lfs/1", "https://blocked.lab.test/", "https://blocked.lab.test/again"}
			for _, u := range urls {
				cmd := exec.Command(script, "exec", "curl", "-s", "-o", "/dev/null", "--max-time", "5", "-x", "http://10.99.31.28:3128", "--cacert", ca, "-A", "agent/1.0", u)
				cmd.Run() // the blocked ones fail: the proxy refuses them
			}
			time.Sleep(500 * time.Millisecond) // the proxy writes its record as it closes the tunnel
			dir := t.TempDir()
			real := filepath.Join(dir, "access.log")
			os.WriteFile(real, tail(t, log, logSize), 0o644)
			// Served through the proxy: the lab's own record, by name and port.
			want := map[string]bool{}
			for _, s := range []struct {
				file string
				size int64
			}{{"srv-api.log", apiSize}, {"srv-git.log", gitSize}} {
				for _, line := range strings.Split(string(tail(t, filepath.Join(served, s.file), s.size)), "\n") {
					f := strings.Fields(line)
					if len(f) >= 4 && (f[1] == "10.99.31.28" || f[1] == "fd99:0:0:31::28") { // the proxy, either family
						want[f[2]+":"+f[3]] = true
					}
				}
			}
			if !want["git.lab.test:443"] || !want["objects.git.lab.test:443"] || !want["api.lab.test:80"] {
				t.Fatalf("the lab's servers recorded %v: the agent's requests did not get through", want)
			}

			// The aged synthetic record: forty days in which the api was used.
			aged := filepath.Join(dir, "aged.log")
			var b strings.Builder
			end := time.Now().Add(-time.Hour)
			for d := 40; d >= 1; d-- {
				ts := end.Add(-time.Duration(d) * 24 * time.Hour).Unix()
				fmt.Fprintf(&b, "%d.000      3 10.99.1.2 TCP_TUNNEL/200 5100 CONNECT api.lab.test:443 - HIER_DIRECT/10.99.10.10 -\n", ts)
			}
			os.WriteFile(aged, []byte(b.String()), 0o644)

			full := strings.Replace(string(labPolicy(t)), "    allow:\n", "    allow:\n"+
				"      - {host: mirror.lab.test, port: 443, reason: \"the package mirror before the move to the proxy cache\"}\n"+
				"      - {host: \"*.github.io\", port: 443, reason: \"documentation an agent once read\"}\n", 1)
			doc := egressUsage(t, full, real, aged)
			found := map[string]string{}
			for _, f := range doc.Findings {
				found[f.Check+" "+f.Subject] = f.Status + " " + f.Actual + " | " + f.Fix
			}
			if f := found["egress.allowance-unused mirror.lab.test:443"]; !strings.HasPrefix(f, "fail no request in the 40 days") || !strings.Contains(f, `the reason says "the package mirror before the move to the proxy cache"`) {
				t.Errorf("unused mirror: %q", f)
			}
			if f := found["egress.allowance-wildcard *.github.io:443"]; !strings.HasPrefix(f, "fail github.io is a multi-tenant suffix") || !strings.Contains(f, `the reason says "documentation an agent once read"`) {
				t.Errorf("risky wildcard: %q", f)
			}
			if f := found["egress.allowance-unused api.lab.test:443"]; !strings.HasPrefix(f, "pass") {
				t.Errorf("api.lab.test: %q", f)
			}
			denied := int64(0)
			for _, d := range doc.EgressUsage.Denied {
				if d.Host == "blocked.lab.test" && d.Sandbox == "10.99.1.2" {
					denied += d.Count
				}
			}
			if denied < 2 {
				t.Errorf("denied attempts to blocked.lab.test from the sandbox: %d, want the agent's 2 (%+v)", denied, doc.EgressUsage.Denied)
			}

			// The audit stage: a narrowed policy, the api only.
			narrowed := strings.Replace(string(labPolicy(t)), "      - {host: git.lab.test, port: 443, reason: \"git fetch and push through the proxy\"}\n", "", 1)
			narrowed = strings.Replace(narrowed, "      - {host: \"*.git.lab.test\", port: 443, probe: objects.git.lab.test, reason: \"git LFS objects\"}\n", "", 1)
			if narrowed == string(labPolicy(t)) {
				t.Fatal("fixtures/lab-policy.yaml changed shape: the git allowances are not where this test removes them")
			}
			doc = egressUsage(t, narrowed, real)
			var got, wantBlocked []string
			for _, w := range doc.EgressUsage.WouldBlock {
				if w.Sandbox != "10.99.1.2" {
					t.Errorf("would block for %s, not the sandbox", w.Sandbox)
				}
				got = append(got, w.Host+":"+strconv.Itoa(w.Port))
			}
			for hp := range want {
				if !strings.HasPrefix(hp, "api.lab.test:") {
					wantBlocked = append(wantBlocked, hp)
				}
			}
			sort.Strings(got)
			sort.Strings(wantBlocked)
			if strings.Join(got, ",") != strings.Join(wantBlocked, ",") {
				t.Errorf("%s: the narrowed policy would block %v; the lab served %v of what it does not allow", flavour, got, wantBlocked)
			}
			t.Logf("%s: would block %v (served: %v)", flavour, got, want)
		})
	}
}
