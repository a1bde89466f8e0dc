package testenv

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os/exec"
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
	// The free port may be taken between Close and the gateway's bind: retry.
	var lastErr error
	for range 3 {
		url, err := startPushgateway(t, bin)
		if err == nil {
			return url
		}
		lastErr = err
	}
	t.Fatalf("start pushgateway: %v", lastErr)
	return ""
}

func startPushgateway(t testing.TB, bin string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--web.listen-address="+addr, "--persistence.file=")
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
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err // for stop
			return "", fmt.Errorf("pushgateway on %s exited: %v\n%s", addr, err, logs.String())
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
	return "", fmt.Errorf("pushgateway on %s not ready after 10s\n%s", addr, logs.String())
}
