package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/report"
)

const fx = "../../fixtures/"

// TestDriftExitCodes: 0 no drift, 1 drift, 2 bad input — for files, inspect
// output and stdin.
func TestDriftExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: v1\nkind: Pod\nmetadata: [\n"), 0o644)
	empty := filepath.Join(dir, "cm.yaml")
	os.WriteFile(empty, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), 0o644)
	notInspect := filepath.Join(dir, "x.json")
	os.WriteFile(notInspect, []byte(`{"not": "a container"}`), 0o644)
	hardened, _ := os.ReadFile(fx + "drift/hardened.yaml")
	// The clean pods of hardened.yaml, and a Deployment that would start a
	// privileged one: drift, whether or not the Deployment has pods yet.
	privileged := string(hardened) + `
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: privileged, namespace: sandboxes}
spec:
  selector: {matchLabels: {app: privileged}}
  template:
    metadata: {labels: {app: privileged, sandbox: "true"}}
    spec:
      containers:
        - name: agent
          image: registry.example/agents/agent@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
          securityContext: {privileged: true}
`
	// Many documents, the 301st malformed, the policies after it: a bad
	// document deep in a big file, after pods that were already read,
	// still stops the run with one line naming the file and document.
	lazy, _ := os.ReadFile(fx + "drift/pods.yaml")
	var big strings.Builder
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&big, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p%d, namespace: sandboxes, labels: {sandbox: \"true\"}}\nspec: {containers: [{name: a, image: x}]}\n", i)
	}
	big.WriteString("---\napiVersion: v1\nkind: Pod\nmetadata: {name: broken\n---\n")
	big.Write(lazy)
	bigBad := filepath.Join(dir, "big.yaml")
	os.WriteFile(bigBad, []byte(big.String()), 0o644)
	cases := []struct {
		name  string
		stdin string
		args  []string
		code  int
		err   string
	}{
		{"malformed document deep in a big file", "", []string{"-f", bigBad}, 2, "big.yaml: document 301: "},
		{"the same on stdin", big.String(), []string{"-f", "-"}, 2, "stdin: document 301: "},
		{"hardened", "", []string{"-f", fx + "drift/hardened.yaml"}, 0, ""},
		{"hardened from stdin", string(hardened), []string{"-f", "-"}, 0, ""},
		{"lazy pods", "", []string{"-f", fx + "drift/pods.yaml"}, 1, ""},
		{"clean pods and a privileged Deployment", privileged, []string{"-f", "-"}, 1, ""},
		{"a directory", "", []string{"-f", fx + "drift"}, 1, ""},
		{"bastion", "", []string{"--policy", fx + "docker-policy.yaml", "--inspect", fx + "drift/docker/bastion.json"}, 1, ""},
		{"rendered container", "", []string{"--policy", fx + "docker-policy.yaml", "--inspect", fx + "drift/docker/rendered.json"}, 0, ""},
		{"malformed file", "", []string{"-f", bad}, 2, "bad.yaml: document 1"},
		{"missing file", "", []string{"-f", filepath.Join(dir, "nope.yaml")}, 2, "nope.yaml"},
		{"no sandbox in the files", "", []string{"-f", empty}, 2, "hold no sandbox"},
		{"not docker inspect", "", []string{"--inspect", notInspect}, 2, "not a container"},
		{"bad policy", "", []string{"--policy", "../../policy/testdata/invalid-negative-uid.yaml", "-f", fx + "drift/pods.yaml"}, 2, "uid"},
		{"bad output", "", []string{"-f", fx + "drift/pods.yaml", "-o", "yaml"}, 2, "-o"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"drift"}, c.args...)
			if !strings.Contains(strings.Join(c.args, " "), "--policy") {
				args = append(args, "--policy", fx+"policy.yaml")
			}
			t.Setenv("KUBECONFIG", "")
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			code, stdout, stderr := runApp(t, c.stdin, args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, stdout, stderr)
			}
			if c.err != "" && !strings.Contains(stderr, c.err) {
				t.Fatalf("stderr %q lacks %q", stderr, c.err)
			}
			if c.code == 2 && (strings.Count(stderr, "\n") != 1 || stdout != "") {
				t.Fatalf("bad input must be one line on stderr and nothing on stdout:\nstdout %q\nstderr %q", stdout, stderr)
			}
		})
	}
}

// TestDriftDockerUnreachable: an engine that cannot be reached is exit 3,
// one line on stderr.
func TestDriftDockerUnreachable(t *testing.T) {
	sock := "unix://" + filepath.Join(t.TempDir(), "no-docker.sock")
	code, stdout, stderr := runApp(t, "", "drift", "--policy", fx+"docker-policy.yaml", "--docker", "--docker-host", sock, "--timeout", "10s")
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code != 3 || len(lines) != 1 || !strings.Contains(stderr, "no-docker.sock") || !strings.Contains(stdout, "COULD NOT CHECK") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func TestDriftNeedsASource(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	code, _, stderr := runApp(t, "", "drift", "--policy", fx+"policy.yaml")
	if code != 2 || !strings.Contains(stderr, "nothing to check") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// TestDriftJUnit: a testsuite per drifted object plus one summary suite;
// failures carry "expected X, actual Y" and the fix.
func TestDriftJUnit(t *testing.T) {
	code, stdout, stderr := runApp(t, "", "drift", "--policy", fx+"policy.yaml", "-f", fx+"drift/pods.yaml", "-o", "junit")
	if code != 1 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		Suites []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Body    string `xml:",chardata"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	var m struct{ pods int }
	for _, s := range doc.Suites {
		if strings.HasPrefix(s.Name, "pod/") {
			m.pods++
			for _, c := range s.Cases {
				if c.Failure == nil || !strings.HasPrefix(c.Failure.Message, "expected ") || !strings.Contains(c.Failure.Body, "fix:") {
					t.Errorf("%s %s: %+v", s.Name, c.Name, c.Failure)
				}
			}
		} else if s.Name != "drift" {
			t.Errorf("unexpected suite %s", s.Name)
		}
	}
	// Every lazy pod drifted; the hardened one has no suite.
	if m.pods != 35 {
		t.Errorf("%d pod suites, want 35 (one per drifted pod)", m.pods)
	}
}

// TestRenderThenDrift: render's YAML, piped into drift, is clean — the same
// path a user takes with `sandprobe render | sandprobe drift -f -`.
func TestRenderThenDrift(t *testing.T) {
	for _, c := range []struct {
		policy, probeImage string
		args               []string
		want, absent       []string
	}{
		{policy: "policy.yaml", probeImage: pinnedProbeImage,
			want: []string{"kind: NetworkPolicy", "kind: CiliumNetworkPolicy", "sandprobe.dev/reason.egress.0", "k8s-app: kube-dns"}},
		// Names without a proxy: only Cilium can express them.
		{policy: "direct-policy.yaml", args: []string{"--egress", "cilium"},
			want: []string{"kind: CiliumNetworkPolicy", "sandprobe.dev/reason.egress.0", "toFQDNs"}, absent: []string{"kind: NetworkPolicy"}},
		{policy: "docker-policy.yaml", want: []string{"kind: NetworkPolicy", "kind: CiliumNetworkPolicy", "sandprobe.dev/reason.egress.0"}},
		// The lab's proxy and resolver by address: ipBlocks on their ports.
		{policy: "lab-policy.yaml", probeImage: pinnedProbeImage, want: []string{"kind: NetworkPolicy", "cidr: 10.99.53.53/32", "cidr: 10.99.31.28/32", "toCIDR"}},
		// Nothing allowed, nothing to resolve: a pure default deny.
		{policy: "local-policy.yaml", want: []string{"kind: NetworkPolicy", "kind: CiliumNetworkPolicy"}, absent: []string{"sandprobe.dev/reason.egress.0"}},
	} {
		t.Run(c.policy, func(t *testing.T) {
			args := append([]string{"render", "--policy", fx + c.policy}, c.args...)
			if c.probeImage != "" {
				args = append(args, "--probe-image", c.probeImage)
			}
			code, yamlOut, stderr := runApp(t, "", args...)
			if code != 0 {
				t.Fatalf("render: exit %d: %s", code, stderr)
			}
			for _, want := range append([]string{"kind: ConfigMap", "kind: Pod"}, c.want...) {
				if !strings.Contains(yamlOut, want) {
					t.Errorf("render output lacks %q", want)
				}
			}
			for _, no := range c.absent {
				if strings.Contains(yamlOut, no+"\n") {
					t.Errorf("render output has %q", no)
				}
			}
			code, out, stderr := runApp(t, yamlOut, "drift", "--policy", fx+c.policy, "-f", "-", "-o", "json")
			if code != 0 {
				t.Fatalf("drift of render's output: exit %d\n%s\n%s", code, out, stderr)
			}
			var run report.Run
			if err := json.Unmarshal([]byte(out), &run); err != nil || run.Scanned != 1 {
				t.Fatalf("scanned %d: %v", run.Scanned, err)
			}
		})
	}
}

// pinnedProbeImage satisfies spec.image.requireDigest (on by default).
const pinnedProbeImage = "ghcr.io/sandprobe/sandprobe@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestRenderRefusesCutOff: render will not write an egress policy that
// cuts the sandbox off from what its own policy requires — the proxy or the
// resolver with nowhere to allow, a name a NetworkPolicy cannot match —
// exit 2, one line per problem naming its field (FILE: field: message, as
// validate prints), and nothing on stdout.
func TestRenderRefusesCutOff(t *testing.T) {
	lab, err := os.ReadFile(fx + "lab-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	without := func(line string) string {
		var out []string
		for _, l := range strings.Split(string(lab), "\n") {
			if !strings.Contains(l, line) {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	for _, c := range []struct {
		name, stdin, policy string
		args                []string
		code                int
		stderr              []string
	}{
		{name: "proxy by name, no location", stdin: without("proxyLocation"), code: 2,
			stderr: []string{"spec.egress.proxyLocation: required: the proxy proxy.lab.test:3128 is a host name"}},
		{name: "names to resolve, no resolver", stdin: without("resolverLocation"), code: 2,
			stderr: []string{"spec.egress.dns.resolverLocation: required: the sandbox resolves proxy.lab.test"}},
		{name: "both", stdin: without("Location"), code: 2,
			stderr: []string{"-: spec.egress.proxyLocation: required", "-: spec.egress.dns.resolverLocation: required"}},
		// Cilium matches the proxy by name, but still needs the resolver.
		{name: "cilium only, proxy by name", stdin: without("proxyLocation"), args: []string{"--egress", "cilium"}, code: 0},
		{name: "cilium only, no resolver", stdin: without("resolverLocation"), args: []string{"--egress", "cilium"}, code: 2,
			stderr: []string{"spec.egress.dns.resolverLocation: required"}},
		{name: "names without a proxy", policy: fx + "direct-policy.yaml", code: 2,
			stderr: []string{"spec.egress.allow[0].host: api.anthropic.com cannot be expressed in a NetworkPolicy", "spec.egress.allow[1].host: *.github.com"}},
		{name: "egress only, both", stdin: without("Location"), args: []string{"--format", "egress"}, code: 2,
			stderr: []string{"-: spec.egress.proxyLocation: required", "-: spec.egress.dns.resolverLocation: required"}},
		{name: "an unpinned probe image and a cut-off", stdin: withoutIn(t, fx+"policy.yaml", "resolverLocation"), args: []string{"--probe-image", "ghcr.io/sandprobe/sandprobe:latest"}, code: 2,
			stderr: []string{"-: spec.probe.image: spec.image.requireDigest is set", "-: spec.egress.dns.resolverLocation: required"}},
		{name: "bad --egress", policy: fx + "lab-policy.yaml", args: []string{"--egress", "calico"}, code: 2,
			stderr: []string{"--egress: want networkpolicy, cilium or both, got \"calico\""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pol := c.policy
			if pol == "" {
				pol = "-"
			}
			code, out, stderr := runApp(t, c.stdin, append([]string{"render", "--policy", pol, "--probe-image", pinnedProbeImage}, c.args...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d: %s", code, c.code, stderr)
			}
			if c.code == 0 {
				return
			}
			if out != "" {
				t.Errorf("stdout not empty: %q", out)
			}
			if lines := strings.Count(strings.TrimRight(stderr, "\n"), "\n") + 1; lines != len(c.stderr) {
				t.Errorf("stderr has %d lines, want one per problem (%d): %q", lines, len(c.stderr), stderr)
			}
			for _, w := range c.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q: %s", w, stderr)
				}
			}
		})
	}
}

// withoutIn is the file without its lines that contain line.
func withoutIn(t *testing.T, path, line string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.Contains(l, line) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRenderEgress: --format egress prints the egress policies alone —
// the NetworkPolicy of each sandbox namespace, or with --egress cilium the
// CiliumNetworkPolicy — no probe pod, no ConfigMap, and needs no pinned
// probe image; drift judges what it prints conformant.
func TestRenderEgress(t *testing.T) {
	for _, c := range []struct {
		args []string
		kind string
	}{
		{nil, "NetworkPolicy"},
		{[]string{"--egress", "cilium"}, "CiliumNetworkPolicy"},
	} {
		code, out, stderr := runApp(t, "", append([]string{"render", "--policy", fx + "policy.yaml", "--format", "egress"}, c.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, stderr)
		}
		var kinds []string
		for _, doc := range strings.Split(out, "---\n")[1:] {
			for _, l := range strings.Split(doc, "\n") {
				if k, ok := strings.CutPrefix(l, "kind: "); ok {
					kinds = append(kinds, k)
				}
			}
		}
		if len(kinds) != 1 || kinds[0] != c.kind {
			t.Errorf("%v: kinds %v, want one %s (the fixture's one namespace)", c.args, kinds, c.kind)
		}
		file := filepath.Join(t.TempDir(), "egress.yaml")
		os.WriteFile(file, []byte(out), 0o644)
		if code, out, stderr := runApp(t, "", "drift", "--policy", fx+"policy.yaml", "-f", file); code != 0 {
			t.Errorf("%v: drift of what render printed: exit %d\n%s%s", c.args, code, out, stderr)
		}
	}
}

func TestRenderFormats(t *testing.T) {
	code, out, _ := runApp(t, "", "render", "--policy", fx+"docker-policy.yaml", "--format", "docker", "--nonce", "abc")
	if code != 0 || !strings.HasPrefix(out, "docker run --rm -i ") || !strings.Contains(out, "--cap-drop ALL") ||
		!strings.Contains(out, "--network sandprobe-drift-internal") || !strings.Contains(out, "--nonce abc") {
		t.Fatalf("exit %d: %s", code, out)
	}
	code, out, _ = runApp(t, "", "render", "--policy", fx+"docker-policy.yaml", "--format", "docker-json")
	var argv []string
	if code != 0 || json.Unmarshal([]byte(out), &argv) != nil || argv[0] != "docker" {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--policy", fx + "policy.yaml"}, "not pinned by digest"},
		{[]string{"--policy", fx + "docker-policy.yaml", "--format", "helm"}, "--format"},
		{[]string{}, "--policy is required"},
	} {
		code, _, stderr := runApp(t, "", append([]string{"render"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.err) {
			t.Errorf("%v: exit %d, stderr %q", c.args, code, stderr)
		}
	}
}
