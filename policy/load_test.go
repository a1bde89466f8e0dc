package policy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInvalidPolicies loads every testdata/invalid-*.yaml and expects each
// "# want:" line to appear as one of the reported problems.
func TestInvalidPolicies(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("want at least 20 invalid policies, have %d", len(files))
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var wants []string
			for _, line := range strings.Split(string(data), "\n") {
				if w, ok := strings.CutPrefix(line, "# want: "); ok {
					wants = append(wants, w)
				}
			}
			if len(wants) == 0 {
				t.Fatal("no # want: line")
			}
			_, err = Load(data)
			if err == nil {
				t.Fatal("loaded without error")
			}
			var got []string
			for _, p := range Problems(err) {
				got = append(got, p.Error())
				if strings.Contains(p.Error(), "\n") {
					t.Errorf("problem spans lines: %q", p.Error())
				}
			}
			for _, w := range wants {
				found := false
				for _, g := range got {
					if strings.Contains(g, w) {
						found = true
					}
				}
				if !found {
					t.Errorf("want a problem containing %q, got:\n  %s", w, strings.Join(got, "\n  "))
				}
			}
		})
	}
}

func TestEveryProblemAtOnce(t *testing.T) {
	data := []byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: t}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: -5, gid: 1}
  capabilities: [BOGUS]
  egress:
    timeout: 90s
    allow:
      - {host: "a..b", reason: x}
      - {host: ok.example.com}
`)
	_, err := Load(data)
	probs := Problems(err)
	want := []string{"spec.identity.uid", "spec.capabilities[0]", "spec.egress.timeout", "spec.egress.allow[0].host", "spec.egress.allow[1].reason"}
	for _, w := range want {
		found := false
		for _, p := range probs {
			if p.Path == w {
				found = true
				if p.Line == 0 {
					t.Errorf("%s: no line number", w)
				}
			}
		}
		if !found {
			t.Errorf("missing problem at %s; got %v", w, err)
		}
	}
}

func TestUnknownFieldsAllReported(t *testing.T) {
	data := []byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: t, owner: me}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 1, gid: 1, user: bob}
  egres: {}
`)
	_, err := Load(data)
	probs := Problems(err)
	paths := map[string]int{}
	for _, p := range probs {
		paths[p.Path] = p.Line
	}
	for path, line := range map[string]int{"metadata.owner": 3, "spec.identity.user": 6, "spec.egres": 7} {
		if paths[path] != line {
			t.Errorf("%s: want line %d, got %v (all: %v)", path, line, paths[path], err)
		}
	}
}

func TestReferencePolicyDefaults(t *testing.T) {
	p, _, err := LoadFile("../fixtures/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Spec
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"metadata addresses", strings.Join(s.Egress.Metadata.Addresses, " "), "169.254.169.254 fd00:ec2::254 169.254.170.2 100.100.100.200"},
		{"metadata ports", fmt.Sprint(s.Egress.Metadata.Ports), "[80 443]"},
		{"timeout", s.Egress.Timeout.Duration, 3 * time.Second},
		{"token path", s.TokenPath, DefaultTokenPath},
		{"no_new_privs", s.NoNewPrivs(), true},
		{"allow scheme", s.Egress.Allow[0].Scheme, "https"},
		{"wildcard host kept", s.Egress.Allow[1].Host, "*.github.com"},
		{"tool timeout", s.Image.Tools[0].Timeout.Duration, DefaultToolTimeout},
		{"dns", s.Egress.DNS.ArbitraryNames, "deny"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestNormalisesHostsAndCapabilities(t *testing.T) {
	data := []byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: t}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  capabilities: [cap_net_bind_service]
  egress:
    allow:
      - {host: "API.Example.COM.:8443", reason: x}
`)
	p, err := Load(data)
	if err != nil {
		t.Fatal(err)
	}
	a := p.Spec.Egress.Allow[0]
	if a.Host != "api.example.com" || a.Port != 8443 || a.Scheme != "https" {
		t.Errorf("got %+v", a)
	}
	if p.Spec.Capabilities[0] != "NET_BIND_SERVICE" {
		t.Errorf("capability not normalised: %v", p.Spec.Capabilities)
	}
}

func TestAliasBombIsAnError(t *testing.T) {
	data := []byte(`a: &a ["x","x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
apiVersion: sandprobe.dev/v1alpha1
`)
	if _, err := Load(data); err == nil {
		t.Fatal("alias bomb loaded")
	}
}

func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	files = append(files, "../fixtures/policy.yaml")
	for _, file := range files {
		b, _ := os.ReadFile(file)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Load(data)
		if err == nil {
			if p == nil {
				t.Fatal("nil policy without error")
			}
			// A loaded policy must survive defaulting and validation again.
			p.Default()
			if err := p.Validate(); err != nil {
				t.Fatalf("valid policy fails re-validation: %v", err)
			}
			// Its effective form means exactly the same policy.
			out, err := p.Effective()
			if err != nil {
				t.Fatalf("effective: %v", err)
			}
			p2, err := Load(out)
			if err != nil {
				t.Fatalf("effective policy does not load: %v\n%s", err, out)
			}
			if out2, _ := p2.Effective(); !bytes.Equal(out, out2) {
				t.Fatalf("effective round trip changed the policy:\n%s\n---\n%s", out, out2)
			}
			return
		}
		for _, prob := range Problems(err) {
			if prob.Error() == "" {
				t.Fatal("empty problem")
			}
		}
	})
}

// TestMetadataSet: the usual metadata places by default; the one-address
// form and the list form each replace them; writing both is an error.
func TestMetadataSet(t *testing.T) {
	head := "apiVersion: sandprobe.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {name: t}\nspec:\n  selector: {matchLabels: {sandbox: \"true\"}}\n  identity: {uid: 65532, gid: 65532}\n"
	cases := []struct {
		name, metadata, addrs, ports, err string
	}{
		{"defaults", "{}", "169.254.169.254 fd00:ec2::254 169.254.170.2 100.100.100.200", "[80 443]", ""},
		{"one address", "{address: 10.99.169.254, port: 80}", "10.99.169.254", "[80]", ""},
		{"a list", `{addresses: [10.99.169.254, "fd99:0:0:169::254"], ports: [80, 443, 8775]}`, "10.99.169.254 fd99:0:0:169::254", "[80 443 8775]", ""},
		{"both forms", "{address: 10.0.0.1, addresses: [10.0.0.2]}", "", "", "spec.egress.metadata.address: write either address (one) or addresses (a list), not both"},
		{"a name in the list", "{addresses: [10.0.0.1, metadata.google.internal]}", "", "", `spec.egress.metadata.addresses[1]: must be an IP address, got "metadata.google.internal"`},
		{"port out of range", "{ports: [80, 70000]}", "", "", "spec.egress.metadata.ports[1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Load([]byte(head + "  egress: {metadata: " + c.metadata + "}\n"))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := p.Spec.Egress.Metadata
			if got := strings.Join(m.Addresses, " "); got != c.addrs || fmt.Sprint(m.Ports) != c.ports {
				t.Errorf("addresses %q ports %v, want %q %s", got, m.Ports, c.addrs, c.ports)
			}
			// Defaulting again changes nothing.
			again := *p
			again.Default()
			if err := again.Validate(); err != nil {
				t.Errorf("defaulted twice: %v", err)
			}
		})
	}
}
