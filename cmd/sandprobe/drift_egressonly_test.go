package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// egressPolicy is a NetworkPolicy for the fixture policy's sandboxes, as a
// pull request would change it.
func egressPolicy(name, egress string) string {
	return `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: ` + name + `, namespace: sandboxes}
spec:
  podSelector: {matchLabels: {sandbox: "true"}}
  policyTypes: [Egress]
  egress:
` + egress
}

// conformantEgress is what render makes of the fixture policy for its
// egress, reduced to the NetworkPolicy: DNS to the resolver and the proxy.
func conformantEgress(t *testing.T) string {
	t.Helper()
	code, out, stderr := runApp(t, "", "render", "--policy", fx+"policy.yaml", "--egress", "networkpolicy",
		"--probe-image", "ghcr.io/sandprobe/sandprobe@sha256:"+strings.Repeat("0", 64))
	if code != 0 {
		t.Fatalf("render: exit %d: %s", code, stderr)
	}
	for _, doc := range strings.Split(out, "\n---\n") {
		if strings.Contains(doc, "kind: NetworkPolicy") {
			return doc + "\n"
		}
	}
	t.Fatalf("render wrote no NetworkPolicy:\n%s", out)
	return ""
}

// TestDriftEgressOnlyFiles: a pull request that changes only egress
// policies is judged against the policy's selector — a representative
// sandbox in each sandbox namespace — not refused for holding no
// workload: an allow-all rule exits 1 (at its line), the rendered policy
// exits 0, and whether the cluster restricts the sandboxes otherwise is
// left unjudged, said so. A policy selecting no sandbox is a note.
func TestDriftEgressOnlyFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	allowAll := write("allow-all.yaml", egressPolicy("sandbox-egress", "    - {}\n"))
	world := write("world.yaml", egressPolicy("sandbox-egress", "    - to: [{ipBlock: {cidr: 0.0.0.0/0}}]\n"))
	good := write("good.yaml", conformantEgress(t))
	cnp := write("cnp.yaml", `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: sandbox-debug, namespace: sandboxes}
spec:
  endpointSelector: {matchLabels: {sandbox: "true"}}
  egress:
    - toEntities: [world]
`)
	other := write("other.yaml", strings.Replace(egressPolicy("web", "    - {}\n"), `{sandbox: "true"}`, `{app: web}`, 1))
	for _, c := range []struct {
		name     string
		file     string
		code     int
		want     []string
		wantNote string
	}{
		{"allow-all", allowAll, 1, []string{"FAIL high     drift.netpol.any-destination networkpolicy/sandbox-egress", "allow-all.yaml:8"}, ""},
		{"the whole internet", world, 1, []string{"drift.netpol.world", "world.yaml:8"}, ""},
		{"a Cilium policy to the world", cnp, 1, []string{"drift.cilium.world", "cnp.yaml:"}, ""},
		{"conformant", good, 0, []string{"note: the files hold no workload: their egress policies were judged for a sandbox with the selector's labels (sandbox=true) in namespace sandboxes", "skip high     drift.netpol.egress-unrestricted", "not judged"}, ""},
		{"selects no sandbox", other + "," + good, 0, nil, "select no sandbox"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"drift", "--policy", fx + "policy.yaml"}
			for _, f := range strings.Split(c.file, ",") {
				args = append(args, "-f", f)
			}
			code, out, stderr := runApp(t, "", args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, c.code, out, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in:\n%s", w, out)
				}
			}
			if c.wantNote != "" && strings.Contains(out, "note: egress policies in the files select no sandbox") {
				t.Errorf("a note for the sandboxes while one file selects them:\n%s", out)
			}
		})
	}
	// Only a policy for other pods: nothing to judge, as before.
	code, _, stderr := runApp(t, "", "drift", "--policy", fx+"policy.yaml", "-f", other)
	if code != 2 || !strings.Contains(stderr, "no egress policy that selects one") {
		t.Errorf("a policy for other pods only: exit %d, %s", code, stderr)
	}
}

// TestDriftRecursive: -R reads a nested tree as kubectl does; without it,
// a note names the subdirectories, hidden directories and other files not
// read, so a half-read tree never looks checked.
func TestDriftRecursive(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "team-a", "egress"), 0o755)
	os.MkdirAll(filepath.Join(dir, ".git"), 0o755)
	os.WriteFile(filepath.Join(dir, "good.yaml"), []byte(conformantEgress(t)), 0o644)
	os.WriteFile(filepath.Join(dir, "team-a", "egress", "open.yaml"), []byte(egressPolicy("team-a-open", "    - {}\n")), 0o644)
	os.WriteFile(filepath.Join(dir, ".git", "x.yaml"), []byte(egressPolicy("hidden", "    - {}\n")), 0o644)
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("# deploy\n"), 0o644)

	code, out, _ := runApp(t, "", "drift", "--policy", fx+"policy.yaml", "-f", dir)
	if code != 0 {
		t.Fatalf("without -R: exit %d, want 0 (the nested file is not read)\n%s", code, out)
	}
	for _, w := range []string{"1 subdirectory not read (give -R to read them): team-a", "hidden directory not read: .git", "1 file not read (only .yaml, .yml and .json are): README.md"} {
		if !strings.Contains(out, w) {
			t.Errorf("no note %q in:\n%s", w, out)
		}
	}
	for _, flag := range []string{"-R", "--recursive"} {
		code, out, _ = runApp(t, "", "drift", "--policy", fx+"policy.yaml", flag, "-f", dir)
		if code != 1 || !strings.Contains(out, "networkpolicy/team-a-open") || !strings.Contains(out, filepath.Join("team-a", "egress", "open.yaml")+":8") || strings.Contains(out, "networkpolicy/hidden") {
			t.Errorf("%s: exit %d, want 1 with the nested allow-all at its line and nothing from .git\n%s", flag, code, out)
		}
		if strings.Contains(out, "subdirectory not read") {
			t.Errorf("%s: still a note for the subdirectory:\n%s", flag, out)
		}
	}
}

// TestDriftOnlyNestedFiles: a tree whose manifests all sit in
// subdirectories, given without -R, reads nothing: exit 2, and the one
// line says which subdirectories were left unread (the likely mistake).
func TestDriftOnlyNestedFiles(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "team-a", "egress"), 0o755)
	os.WriteFile(filepath.Join(dir, "team-a", "egress", "open.yaml"), []byte(egressPolicy("team-a-open", "    - {}\n")), 0o644)
	code, _, stderr := runApp(t, "", "drift", "--policy", fx+"policy.yaml", "-f", dir)
	if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "1 subdirectory not read (give -R to read them): team-a") {
		t.Errorf("exit %d, want 2 with one line naming team-a as not read:\n%s", code, stderr)
	}
	if code, out, _ := runApp(t, "", "drift", "--policy", fx+"policy.yaml", "-R", "-f", dir); code != 1 || !strings.Contains(out, "networkpolicy/team-a-open") {
		t.Errorf("-R: exit %d, want 1 naming the nested allow-all:\n%s", code, out)
	}
}
