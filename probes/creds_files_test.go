package probes

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/result"
)

// TestCredFiles: each credential file a sandbox can read is named by path
// and what it holds, never by content; a healthy home (an .npmrc naming
// ${NPM_TOKEN}, a docker config with a credential helper, a kubeconfig the
// policy declares, a public key) passes.
func TestCredFiles(t *testing.T) {
	planted := map[string]string{
		".git-credentials":    "https://x:" + plantedSecret + "@github.com\n",
		".netrc":              "machine github.com login x password " + plantedSecret + "\n",
		".npmrc":              "//registry.npmjs.org/:_authToken=" + plantedSecret + "\n",
		".docker/config.json": `{"auths":{"ghcr.io":{"auth":"` + plantedSecret + `"}}}`,
		".aws/credentials":    "[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = " + plantedSecret + "\n",
		".config/gcloud/application_default_credentials.json": `{"type":"authorized_user","refresh_token":"` + plantedSecret + `"}`,
		".kube/config":         "apiVersion: v1\nusers: [{name: u, user: {token: " + plantedSecret + "}}]\n",
		".config/gh/hosts.yml": "github.com:\n  oauth_token: " + plantedSecret + "\n",
		".ssh/id_ed25519":      "-----BEGIN OPENSSH PRIVATE KEY-----\n" + plantedSecret + "\n-----END OPENSSH PRIVATE KEY-----\n",
	}
	healthy := map[string]string{
		".npmrc":              "//registry.npmjs.org/:_authToken=${NPM_TOKEN}\nengine-strict=true\n",
		".docker/config.json": `{"credsStore":"desktop","credHelpers":{"gcr.io":"gcloud"}}`,
		".ssh/id_ed25519.pub": "ssh-ed25519 AAAA x@y\n",
		".aws/config":         "[default]\nregion = eu-west-1\n",
		".kube/config":        "apiVersion: v1\nusers: [{name: u, user: {exec: {command: aws}}}]\n",
	}
	write := func(home string, files map[string]string) {
		for rel, c := range files {
			p := filepath.Join(home, rel)
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, []byte(c), 0o600)
		}
	}
	t.Run("planted", func(t *testing.T) {
		home := t.TempDir()
		write(home, planted)
		ext := filepath.Join(t.TempDir(), "sa.json")
		os.WriteFile(ext, []byte(`{"private_key":"`+plantedSecret+`"}`), 0o600)
		p := mustPolicy(t, "")
		fs := checkCredFiles(context.Background(), &Env{Policy: p, Environ: []string{"HOME=" + home, "GOOGLE_APPLICATION_CREDENTIALS=" + ext}})
		got := map[string]result.Finding{}
		for _, f := range fs {
			got[f.Subject] = f
		}
		for rel := range planted {
			f, ok := got[filepath.Join(home, rel)]
			if !ok || f.Status != result.Fail || f.Expected == "" || f.Actual == "" {
				t.Errorf("%s: %+v", rel, f)
				continue
			}
			t.Logf("%s: %s (%s)", f.Subject, f.Actual, f.Evidence)
		}
		if f := got[ext]; f.Status != result.Fail || !strings.Contains(f.Actual, "GOOGLE_APPLICATION_CREDENTIALS") {
			t.Errorf("the file $GOOGLE_APPLICATION_CREDENTIALS names: %+v", f)
		}
		assertNoPlanted(t, fs, plantedSecret)
	})
	t.Run("healthy", func(t *testing.T) {
		home := t.TempDir()
		write(home, healthy)
		kube := t.TempDir()
		os.WriteFile(filepath.Join(kube, "config"), []byte("users: [{name: u, user: {token: "+plantedSecret+"}}]\n"), 0o600)
		p := mustPolicy(t, fmt.Sprintf("  credentials: [{name: view, source: secret/v, mountPath: %s, reason: r, kubernetes: {scope: {preset: view-only}}}]\n", kube))
		fs := checkCredFiles(context.Background(), &Env{Policy: p, Environ: []string{"HOME=" + home, "KUBECONFIG=" + filepath.Join(kube, "config")}})
		// Only what this test wrote is judged: the machine's own /root and
		// /home are looked at too, and are not this test's to vouch for.
		for _, f := range fs {
			if f.Status != result.Pass && (strings.HasPrefix(f.Subject, home) || strings.HasPrefix(f.Subject, kube)) {
				t.Errorf("a healthy home: %s %s: %s", f.Status, f.Subject, f.Actual)
			}
			t.Logf("%s %s %s (%s)", f.Status, f.Subject, f.Actual, f.Evidence)
		}
	})
}

// TestProcEnviron: an orphaned process of the same uid holding a token in
// its environment is named (pid, name, the variable, never the value);
// the probe's own children, which inherit its environment, are not.
func TestProcEnviron(t *testing.T) {
	p := mustPolicy(t, "  secrets: {placeholders: [broker]}\n")
	own := append(os.Environ(), "GITHUB_TOKEN=inherited-by-children")
	child := exec.Command("sleep", "30")
	child.Env = own
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	fs := checkProcEnviron(context.Background(), &Env{Policy: p, Environ: own})
	for _, f := range fs {
		if f.Status != result.Pass && strings.Contains(f.Actual, "GITHUB_TOKEN") {
			t.Errorf("a child holding the probe's own environment is named: %+v", f)
		}
	}

	// A sidecar: started by a shell that exits, so it is nobody's child here.
	out, err := exec.Command("sh", "-c", "env AGENT_API_KEY='"+plantedSecret+"' BROKER_TOKEN=broker sleep 30 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	fmt.Sscan(string(out), &pid)
	defer syscall.Kill(pid, syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond)
	fs = checkProcEnviron(context.Background(), &Env{Policy: p, Environ: own})
	var hit *result.Finding
	for i, f := range fs {
		if f.Subject == fmt.Sprintf("pid %d (sleep)", pid) {
			hit = &fs[i]
		}
	}
	if hit == nil || hit.Status != result.Fail || !strings.Contains(hit.Actual, "AGENT_API_KEY") || strings.Contains(hit.Actual, "BROKER_TOKEN") {
		t.Fatalf("the sidecar (pid %d) is not named, or a placeholder is: %+v", pid, fs)
	}
	t.Logf("%s: %s (%s)", hit.Subject, hit.Actual, hit.Evidence)
	assertNoPlanted(t, fs, plantedSecret)
}
