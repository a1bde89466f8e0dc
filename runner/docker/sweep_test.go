package docker_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/docker"
)

// The child half of TestSweepKilledRunners: a runner that starts a probe
// container and waits in it until it is SIGKILLed.
const (
	childEnv         = "SANDPROBE_TEST_SWEEP_CHILD"
	childHostEnv     = "SANDPROBE_TEST_SWEEP_HOST"
	childNonceEnv    = "SANDPROBE_TEST_SWEEP_NONCE"
	childDeadlineEnv = "SANDPROBE_TEST_SWEEP_DEADLINE"
	childBinaryEnv   = "SANDPROBE_TEST_SWEEP_BINARY"
	childPolicyEnv   = "SANDPROBE_TEST_SWEEP_POLICY"
)

// runSweepChild is the killed runner: it never returns on its own before
// its deadline (the probe sleeps), and it is killed long before that.
func runSweepChild() {
	cli, err := docker.NewClient(os.Getenv(childHostEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	deadline, _ := time.ParseDuration(os.Getenv(childDeadlineEnv))
	p, raw, err := policy.LoadFile(os.Getenv(childPolicyEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	be := &docker.Backend{Client: cli, Image: debianImage, Binary: os.Getenv(childBinaryEnv), Command: []string{"sleep", "600"}}
	_, err = be.Run(context.Background(), runner.ProbeSpec{Policy: p, PolicyBytes: raw, Nonce: os.Getenv(childNonceEnv), Deadline: deadline})
	fmt.Fprintln(os.Stderr, "the child runner returned:", err)
	os.Exit(0)
}

// startKilledRunner runs a child runner until its probe container runs,
// SIGKILLs it, and returns the container it left behind.
func startKilledRunner(t *testing.T, e *engine, nonce string, deadline time.Duration) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childHostEnv+"="+e.host, childNonceEnv+"="+nonce,
		childDeadlineEnv+"="+deadline.String(), childBinaryEnv+"="+testenv.Binary(t),
		childPolicyEnv+"="+filepath.Join(testenv.ModuleRoot(t), "fixtures", "scratch-policy.yaml"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	id := ""
	for stop := time.Now().Add(60 * time.Second); time.Now().Before(stop) && id == ""; time.Sleep(100 * time.Millisecond) {
		list, err := e.cli.ContainerList(context.Background(), client.ContainerListOptions{
			Filters: make(client.Filters).Add("label", docker.LabelNonce+"="+nonce).Add("status", "running"),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) > 0 {
			id = list.Items[0].ID
		}
	}
	if id == "" {
		t.Fatalf("the child runner's probe container never ran: %s", out.String())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // "signal: killed"
	if _, err := e.cli.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("the killed runner's container is already gone (%v): nothing to sweep", err)
	}
	return id
}

// TestSweepKilledRunners: runners SIGKILLed mid-run leave their probe
// containers behind on the real engine; the next run removes the one past
// its deadline (plus SweepAfter) and leaves alone the one whose deadline has
// not passed — it may belong to a runner still at work.
func TestSweepKilledRunners(t *testing.T) {
	e := newEngine(t)
	testenv.DockerImage(t, e.host, debianImage)
	testenv.DockerImage(t, e.host, scratchImage)
	// The old runner's deadline is short, but long enough that it is
	// killed before it could remove its container itself.
	// Container names come from the nonce's first 24 characters.
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	old := startKilledRunner(t, e, "sweep-old-"+id, 5*time.Second)
	young := startKilledRunner(t, e, "sweep-young-"+id, 10*time.Minute)
	t.Cleanup(func() {
		_, _ = e.cli.ContainerRemove(context.Background(), young, client.ContainerRemoveOptions{Force: true})
		_, _ = e.cli.ContainerRemove(context.Background(), old, client.ContainerRemoveOptions{Force: true})
	})
	// Let the old one's deadline and the grace pass (created + 5s + 1s).
	time.Sleep(7 * time.Second)

	p, raw := loadFixture(t, "scratch-policy.yaml")
	be := &docker.Backend{Image: scratchImage, SweepAfter: time.Second}
	run, err := e.verify(t, be, p, raw, time.Minute)
	if err != nil {
		t.Fatalf("the next run: %v (%v)", err, names(run.Findings))
	}
	if _, err := e.cli.ContainerInspect(context.Background(), old, client.ContainerInspectOptions{}); err == nil {
		t.Errorf("the next run left the expired container %s of a killed runner", old[:12])
	}
	if _, err := e.cli.ContainerInspect(context.Background(), young, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("the next run removed %s, whose deadline had not passed: %v", young[:12], err)
	}
}
