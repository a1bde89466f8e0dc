package testenv

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Promtool returns the path of promtool (Debian's prometheus package).
func Promtool(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		Missing(t, "promtool not on PATH (apt-get install prometheus)")
	}
	return p
}

// Pushgateway starts a real Pushgateway on a free loopback port, without
// persistence, and returns its base URL. It is killed when the test ends.
func Pushgateway(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus-pushgateway")
	if err != nil {
		Missing(t, "prometheus-pushgateway not on PATH (apt-get install prometheus-pushgateway)")
	}
	return startLoopbackDaemon(t, "pushgateway", func(addr string) []string {
		return []string{bin, "--web.listen-address=" + addr, "--persistence.file="}
	})
}

// Prometheus starts a real Prometheus server (Debian's prometheus) on a free
// loopback port with this configuration file body (global settings and
// scrape_configs) and a storage directory of the test's own, and returns its
// base URL. It is killed when the test ends.
func Prometheus(t testing.TB, config string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		Missing(t, "prometheus not on PATH (apt-get install prometheus)")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return startLoopbackDaemon(t, "prometheus", func(addr string) []string {
		return []string{bin, "--config.file=" + cfg, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + addr, "--log.level=warn"}
	})
}

// startLoopbackDaemon starts a Prometheus-style server (one that answers
// /-/ready) on a free loopback port, retrying when the port is taken between
// choosing it and the server's bind.
func startLoopbackDaemon(t testing.TB, name string, argv func(addr string) []string) string {
	t.Helper()
	var lastErr error
	for range 3 {
		url, err := startDaemonOnce(t, name, argv)
		if err == nil {
			return url
		}
		lastErr = err
	}
	t.Fatalf("start %s: %v", name, lastErr)
	return ""
}

func startDaemonOnce(t testing.TB, name string, argv func(addr string) []string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs bytes.Buffer
	args := argv(addr)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}
	url := "http://" + addr
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err // for stop
			return "", fmt.Errorf("%s on %s exited: %w\n%s", name, addr, err, logs.String())
		default:
		}
		if resp, err := client.Get(url + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Cleanup(stop)
				return url, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	return "", fmt.Errorf("%s on %s not ready after 20s\n%s", name, addr, logs.String())
}
