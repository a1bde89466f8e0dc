package probes

import (
	"bufio"
	"context"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

func TestPlanEgress(t *testing.T) {
	p := mustPolicy(t, `
  egress:
    proxy: http://proxy.internal:3128
    allow:
      - {host: api.example.com, reason: r}
      - {host: "*.github.com", reason: r}
      - {host: "*.git.example.com", probe: objects.git.example.com, reason: r}
    mustFail:
      hosts: [blocked.example.com, {target: "drop.example.com:80", expect: timeout}]
      ips: [10.0.0.0/8]
`)
	plan, notes := PlanEgress(p.Spec.Egress)
	got := map[string]bool{}
	for _, a := range plan {
		got[a.Check+" "+a.Subject] = true
	}
	for _, want := range []string{
		"egress.allowed api.example.com:443 via proxy",
		"egress.allowed objects.git.example.com:443 via proxy",
		"egress.must-fail blocked.example.com:443",
		"egress.must-fail blocked.example.com:443 via proxy",
		"egress.must-fail drop.example.com:80",
		"egress.must-fail 10.0.0.1:443",
		"egress.metadata 169.254.169.254:80",
		"egress.metadata 169.254.169.254:80 via proxy",
		"egress.proxy-bypass api.example.com:443 direct",
		"egress.dns-exfil *.example.com",
		"egress.dns-exfil *.github.com",
	} {
		if !got[want] {
			t.Errorf("missing attempt %q; plan: %v", want, got)
		}
	}
	if len(notes) != 1 || notes[0].Status != report.Skip || !strings.Contains(notes[0].Subject, "*.github.com") {
		t.Errorf("a wildcard without probe name should be one skip note, got %+v", notes)
	}
	for _, a := range plan {
		if a.Subject == "drop.example.com:80" && (a.Expect != "timeout" || a.Scheme != "http") {
			t.Errorf("pinned target lost its expect or scheme: %+v", a)
		}
	}
}

func TestClassifyRealErrors(t *testing.T) {
	// A port nobody listens on, on loopback: the kernel answers with a reset.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	_, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if o := classify(err); o.class != policy.VerdictRefused || o.errno != "ECONNREFUSED" || o.stoppedBy != report.StoppedByNetwork {
		t.Errorf("closed port: %+v", o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	var d net.Dialer
	_, err = d.DialContext(ctx, "tcp", "127.0.0.1:1")
	if o := classify(err); o.class != policy.VerdictTimeout {
		t.Errorf("deadline: %s (%v)", o.class, err)
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, policy.VerdictAnswered},
		{&net.DNSError{Name: "x.test", Err: "no such host", IsNotFound: true}, policy.VerdictNXDomain},
		{&net.DNSError{Name: "x.test", Err: "i/o timeout", IsTimeout: true}, policy.VerdictDNSTimeout},
		{&errProxyDenied{status: "403 Filtered"}, policy.VerdictProxyDenied},
		{io.EOF, policy.VerdictError},
	} {
		if got := classify(c.err).class; got != c.want {
			t.Errorf("%v: %s, want %s", c.err, got, c.want)
		}
	}
}

// connectProxy is a minimal CONNECT/absolute-URL proxy for unit tests of
// the client half; the lab tests use a real tinyproxy.
func connectProxy(t *testing.T, allow func(host string) bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				host := req.Host
				if !allow(host) {
					io.WriteString(c, "HTTP/1.1 403 Filtered\r\nContent-Length: 0\r\n\r\n")
					return
				}
				up, err := net.Dial("tcp", host)
				if err != nil {
					io.WriteString(c, "HTTP/1.1 500 Unable to connect\r\nContent-Length: 0\r\n\r\n")
					return
				}
				defer up.Close()
				if req.Method != http.MethodConnect {
					req.RequestURI = ""
					req.Write(up)
					io.Copy(c, up)
					return
				}
				io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				go io.Copy(up, c)
				io.Copy(c, up)
			}()
		}
	}()
	return "http://" + l.Addr().String()
}

func TestAllowedThroughProxyWithCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))
	proxyURL := connectProxy(t, func(host string) bool { return strings.HasPrefix(host, "127.0.0.1:") })

	cases := []struct {
		name      string
		caFile    string
		host      string
		wantClass string
	}{
		{"trusted CA", caFile, "127.0.0.1", policy.VerdictAnswered},
		{"unknown CA", "", "127.0.0.1", policy.VerdictError},
		{"proxy refuses", caFile, "localhost", policy.VerdictProxyDenied},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := policy.Egress{Proxy: proxyURL, CAFile: c.caFile}
			client, err := NewNetClient(e)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := strconv.Atoi(port)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r := client.try(ctx, Attempt{Check: checkAllowed, Host: c.host, Port: p, Scheme: "https", ViaProxy: true})
			r.Evidence.Attempted = true
			if r.Class != c.wantClass {
				t.Fatalf("class %s (%s), want %s", r.Class, r.Detail, c.wantClass)
			}
			f := judge(Attempt{Check: checkAllowed, Host: c.host, Port: p, ViaProxy: true}, r, e)
			if (f.Status == report.Pass) != (c.wantClass == policy.VerdictAnswered) || (f.Status == report.Fail && f.Fix == "") {
				t.Errorf("finding %+v", f)
			}
		})
	}
}

func TestJudgePinnedClass(t *testing.T) {
	a := Attempt{Check: checkMustFail, Subject: "10.0.0.1:443", Expect: policy.VerdictTimeout}
	made := report.Attempt{Attempted: true}
	if f := judge(a, Result{Class: policy.VerdictTimeout, Evidence: made}, policy.Egress{}); f.Status != report.Pass {
		t.Errorf("matching class: %s", f.Status)
	}
	f := judge(a, Result{Class: policy.VerdictRefused, Detail: "ECONNREFUSED", Evidence: made}, policy.Egress{})
	if f.Status != report.Fail || !strings.Contains(f.Actual, "refused instead of timeout") || f.Fix == "" {
		t.Errorf("pinned timeout answered by a reset: %+v", f)
	}
	f = judge(a, Result{Class: policy.VerdictAnswered, Detail: "connected", Evidence: made}, policy.Egress{})
	if f.Status != report.Fail || f.Class != policy.VerdictAnswered {
		t.Errorf("answered: %+v", f)
	}
}

func mustPolicy(t *testing.T, spec string) *policy.Policy {
	t.Helper()
	p, err := policy.Load([]byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: t}
spec:
  selector: {matchLabels: {sandbox: "true"}}
` + strings.TrimPrefix(spec, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
