package policy

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const minimalPolicy = `apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: t}
spec:
  selector: {matchLabels: {sandbox: "true"}}
`

// TestSilentPolicyIsStrict: a policy that says nothing but its selector
// means the strictest sandbox — never root, never a writable root, never a
// tag — and the only weakening left is the one no default can fill (which
// isolation runtime a cluster has is the policy's to name).
func TestSilentPolicyIsStrict(t *testing.T) {
	p, err := Load([]byte(minimalPolicy))
	if err != nil {
		t.Fatal(err)
	}
	s := p.Spec
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"uid", s.Identity.UID, int64(DefaultUID)},
		{"gid", s.Identity.GID, int64(DefaultGID)},
		{"allowRoot", s.Identity.AllowRoot, false},
		{"readOnlyRoot", s.Filesystem.ReadOnlyRoot, true},
		{"requireDigest", s.Image.RequireDigest, true},
		{"capabilities", len(s.Capabilities), 0},
		{"noNewPrivileges", s.NoNewPrivs(), true},
		{"seccomp", s.Seccomp, SeccompRuntimeDefault},
		{"token", s.ServiceAccount, TokenAbsent},
		{"dns", s.Egress.DNS.ArbitraryNames, "deny"},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: default %v, want %v", c.name, c.got, c.want)
		}
	}
	var paths []string
	for _, w := range p.Weakenings() {
		paths = append(paths, w.Path)
	}
	if want := []string{"spec.runtime.classNames"}; !reflect.DeepEqual(paths, want) {
		t.Errorf("a silent policy weakens %v, want only %v", paths, want)
	}
}

// TestWrittenZerosOverrideDefaults: a value the file writes replaces the
// default even when it is the zero value, and root needs allowRoot.
func TestWrittenZerosOverrideDefaults(t *testing.T) {
	doc := minimalPolicy + `  identity: {uid: 0, gid: 0, allowRoot: true}
  filesystem: {readOnlyRoot: false}
  image: {requireDigest: false}
  runtime: {classNames: []}
`
	p, written, err := LoadWritten([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	s := p.Spec
	if s.Identity.UID != 0 || s.Identity.GID != 0 || s.Filesystem.ReadOnlyRoot || s.Image.RequireDigest {
		t.Errorf("written zeros lost: %+v %+v %+v", s.Identity, s.Filesystem, s.Image)
	}
	got := map[string]bool{}
	for _, w := range p.Weakenings() {
		got[w.Path] = true
		if !written.Has(w.Path) {
			t.Errorf("%s: reported as not written, but the file writes it", w.Path)
		}
	}
	for _, want := range []string{"spec.identity.allowRoot", "spec.filesystem.readOnlyRoot", "spec.image.requireDigest", "spec.runtime.classNames"} {
		if !got[want] {
			t.Errorf("weakening %s not reported (got %v)", want, got)
		}
	}
}

// TestEffectiveRoundTrip: the effective policy of every fixture and valid
// test policy loads back to exactly the same policy, writes every default
// out, and every weakening of a fixture is written in its file.
func TestEffectiveRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("../fixtures/*.yaml")
	files = append(files, "../manifests/policy.yaml", "../hack/e2e/overlay/policy.yaml")
	if len(files) < 8 {
		t.Fatalf("only %d policies", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, written, err := LoadWritten(data)
			if err != nil {
				t.Fatal(err)
			}
			out, err := p.Effective()
			if err != nil {
				t.Fatal(err)
			}
			p2, written2, err := LoadWritten(out)
			if err != nil {
				t.Fatalf("effective policy does not load: %v\n%s", err, out)
			}
			if out2, _ := p2.Effective(); string(out2) != string(out) {
				t.Errorf("round trip changed the policy:\n%s\n---\n%s", out, out2)
			}
			for _, pth := range []string{"spec.identity.uid", "spec.identity.gid", "spec.filesystem.readOnlyRoot", "spec.image.requireDigest",
				"spec.capabilities", "spec.noNewPrivileges", "spec.seccomp", "spec.serviceAccountToken", "spec.egress.dns.arbitraryNames", "spec.egress.timeout"} {
				if !written2.Has(pth) {
					t.Errorf("effective policy leaves %s out", pth)
				}
			}
			for _, w := range p.Weakenings() {
				if !written.Has(w.Path) {
					t.Errorf("%s weakens %s (%s) without writing it", f, w.Path, w.Means)
				}
			}
		})
	}
}

// TestEffectiveKeepsStrings: label values and globs that read as other
// YAML types stay strings.
func TestEffectiveKeepsStrings(t *testing.T) {
	p, err := Load([]byte(minimalPolicy + "  runtime: {classNames: []}\n  secrets: {placeholders: [\"true\", \"1\", \"*x\"]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Effective()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`sandbox: "true"`, `- "true"`, `- "1"`, `- '*x'`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("effective output lacks %s:\n%s", want, out)
		}
	}
}
