package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/page"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner"
)

// The web configuration's one user: "prober", password
// "probe-the-prober" (bcrypt, cost 10), as exporter-toolkit wants it.
const (
	webUser     = "prober"
	webPassword = "probe-the-prober"
	webHash     = "$2a$10$yLRBvgORssMrOha2cS7N7e4GoSPKcSkrQzkxlfjcrNxDkm59rxDIy"
)

// selfSigned writes a certificate and key for 127.0.0.1 and returns their
// paths and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandprobe-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// startServeWeb runs serve in-process (fake backend) behind webConfig.
func startServeWeb(t *testing.T, webConfig string) string {
	t.Helper()
	p, raw, err := policy.LoadFile(localPolicy)
	if err != nil {
		t.Fatal(err)
	}
	cyc := &cycle{policy: p, raw: raw, backendName: "fake", backend: newSlowBackend()}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := newServer(cyc.run, &outputs{policy: p, history: page.NewHistory(0)}, 5*time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}
	srv.webConfig = webConfig
	sched, _ := runner.ParseSchedule("@every 1h")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.serve(ctx, ln, sched, true) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// TestServeWebConfig: with exporter-toolkit's web configuration (TLS and
// a basic-auth user), every endpoint refuses a request without
// credentials, or with wrong ones, and answers one with them, over TLS
// only; a web configuration that cannot serve is exit 2 before anything
// starts.
func TestServeWebConfig(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	webConfig := filepath.Join(dir, "web.yml")
	os.WriteFile(webConfig, []byte("tls_server_config:\n  cert_file: "+certFile+"\n  key_file: "+keyFile+"\nbasic_auth_users:\n  "+webUser+": "+webHash+"\n"), 0o600)
	addr := startServeWeb(t, webConfig)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	do := func(method, path, user, pass string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "https://"+addr+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/metrics", "/healthz", "/report.json", "/"} {
		if code, _ := do("GET", path, "", ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without credentials: %d, want 401", path, code)
		}
		if code, _ := do("GET", path, webUser, "wrong"); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong password: %d, want 401", path, code)
		}
	}
	if code, _ := do("POST", "/-/reload", "", ""); code != http.StatusUnauthorized {
		t.Errorf("POST /-/reload without credentials: %d, want 401", code)
	}
	waitFor(t, 10*time.Second, "the first run", func() bool {
		code, _ := do("GET", "/report.json", webUser, webPassword)
		return code == http.StatusOK
	})
	if code, body := do("GET", "/metrics", webUser, webPassword); code != http.StatusOK || !strings.Contains(body, "sandprobe_up 1") {
		t.Errorf("GET /metrics with credentials: %d %.200s", code, body)
	}
	if code, body := do("GET", "/healthz", webUser, webPassword); code != http.StatusOK || body != "ok\n" {
		t.Errorf("GET /healthz with credentials: %d %q", code, body)
	}
	// Plain HTTP gets no answer from a TLS listener.
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics"); err == nil {
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP answered 200")
		}
		resp.Body.Close()
	}

	bad := filepath.Join(dir, "bad.yml")
	os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: "+filepath.Join(dir, "missing.crt")+"\n  key_file: "+keyFile+"\n"), 0o600)
	for name, file := range map[string]string{"a missing certificate": bad, "a missing file": filepath.Join(dir, "none.yml")} {
		code, _, stderr := runApp(t, "", "serve", "--policy", localPolicy, "--web.config.file", file, "--listen", "127.0.0.1:0", "--run-at-start=false")
		if code != 2 || !strings.Contains(stderr, "--web.config.file: ") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%s: exit %d, %q; want 2 and one line naming --web.config.file", name, code, stderr)
		}
	}
}

// TestServeReloadPolicy runs the real binary's serve with the local
// backend and changes its policy file under it: SIGHUP and POST /-/reload
// make the next cycle run the new policy without a restart (same pid, the
// runs go on), a bad file keeps the old policy and says why (log, the
// answer, sandprobe_policy_last_reload_successful 0), and a good one
// afterwards sets it back to 1.
func TestServeReloadPolicy(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Binary(t)
	orig, err := os.ReadFile(localPolicy)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(file, orig, 0o644)
	renamed := func(name string) []byte {
		return []byte(strings.Replace(string(orig), "metadata: {name: local-sandbox}", "metadata: {name: "+name+"}", 1))
	}
	cmd := exec.Command(bin, "serve", "--policy", file, "--schedule", "* * * * * *", "--no-network", "--listen", "127.0.0.1:0", "--log-format", "json")
	base, logs := startServeBinary(t, cmd)
	info := func(name string) func() bool {
		return func() bool {
			for k, v := range httpSamples(t, base+"/metrics") {
				if strings.HasPrefix(k, "sandprobe_info{") && strings.Contains(k, `policy="`+name+`"`) && v == 1 {
					return true
				}
			}
			return false
		}
	}
	waitFor(t, 30*time.Second, "a run of local-sandbox", info("local-sandbox"))

	os.WriteFile(file, renamed("reloaded-by-hup"), 0o644)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a run of the policy SIGHUP reloaded", info("reloaded-by-hup"))

	os.WriteFile(file, renamed("reloaded-by-post"), 0o644)
	resp, err := http.Post(base+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "reloaded policy reloaded-by-post\n" {
		t.Errorf("POST /-/reload: %d %q", resp.StatusCode, body)
	}
	waitFor(t, 30*time.Second, "a run of the policy POST /-/reload reloaded", info("reloaded-by-post"))

	// A bad policy: the old one keeps running, and everyone is told why.
	os.WriteFile(file, append(renamed("broken"), []byte("  noSuchField: true\n")...), 0o644)
	resp, err = http.Post(base+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), "the previous policy keeps running") || !strings.Contains(string(body), "noSuchField") {
		t.Errorf("POST /-/reload of a bad policy: %d %q; want 500 naming the field", resp.StatusCode, body)
	}
	if v := httpSamples(t, base+"/metrics")["sandprobe_policy_last_reload_successful"]; v != 0 {
		t.Errorf("sandprobe_policy_last_reload_successful = %v after a bad reload, want 0", v)
	}
	runs := httpSamples(t, base+"/metrics")[`sandprobe_runs_total{result="pass"}`]
	waitFor(t, 30*time.Second, "two more runs after the bad reload", func() bool {
		return httpSamples(t, base+"/metrics")[`sandprobe_runs_total{result="pass"}`] >= runs+2
	})
	if !info("reloaded-by-post")() {
		t.Error("after a bad reload the runs no longer carry the previous policy")
	}
	if !strings.Contains(strings.Join(logs(), "\n"), "policy reload failed: the previous policy keeps running") {
		t.Error("the bad reload was not logged")
	}
	os.WriteFile(file, orig, 0o644)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a good reload after the bad one", func() bool {
		return httpSamples(t, base+"/metrics")["sandprobe_policy_last_reload_successful"] == 1
	})
	if cmd.ProcessState != nil {
		t.Error("serve restarted or exited")
	}
}
