package docker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/docker"
)

// The images hack/images/all.sh builds (Debian + Chromium and its sabotaged
// variants) and the one the tests build from the static binary.
const (
	debianImage       = "sandprobe/debian-chromium:test"
	noChromiumImage   = "sandprobe/debian-nochromium:test"
	noGitImage        = "sandprobe/debian-nogit:test"
	tmp0755Image      = "sandprobe/debian-tmp0755:test"
	rootOnlyImage     = "sandprobe/debian-rootonly:test"
	writableRootImage = "sandprobe/debian-writableroot:test"
	scratchImage      = "sandprobe/verify-scratch:test"
	gvisor            = "runsc-nonet" // runsc without networking: the only runsc that starts here
)

type engine struct {
	host string
	cli  *client.Client
}

func newEngine(t *testing.T) *engine {
	t.Helper()
	testenv.RequireRoot(t) // bind-mounting the binary needs it readable by the engine
	host := testenv.DockerHost(t)
	cli, err := docker.NewClient(host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &engine{host: host, cli: cli}
}

func loadFixture(t *testing.T, name string) (*policy.Policy, []byte) {
	t.Helper()
	p, raw, err := policy.LoadFile(filepath.Join(testenv.ModuleRoot(t), "fixtures", name))
	if err != nil {
		t.Fatal(err)
	}
	return p, raw
}

func nonce(t *testing.T) string {
	return "n-" + strings.NewReplacer("/", "-", " ", "-", "'", "").Replace(strings.ToLower(t.Name()))
}

// verify runs one probe and returns the run as verify-image assembles it,
// and the backend's error.
func (e *engine) verify(t *testing.T, be *docker.Backend, p *policy.Policy, raw []byte, deadline time.Duration) (report.Run, error) {
	t.Helper()
	be.Client = e.cli
	if be.Binary == "" {
		be.Binary = testenv.Binary(t)
	}
	spec := runner.ProbeSpec{Policy: p, PolicyBytes: raw, Nonce: nonce(t), Deadline: deadline, NoNetwork: true}
	results, err := be.Run(context.Background(), spec)
	run := report.Run{Policy: p.Metadata.Name}
	for _, r := range results {
		run.Findings = append(run.Findings, runner.Findings(r.Target, r, probes.FixFor)...)
	}
	e.requireRemoved(t, spec.Nonce)
	return run, err
}

// requireRemoved: whatever happened, no container of this run is left.
func (e *engine) requireRemoved(t *testing.T, nonce string) {
	t.Helper()
	list, err := e.cli.ContainerList(context.Background(), client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", docker.LabelNonce+"="+nonce),
	})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	if len(list.Items) > 0 {
		t.Errorf("container %s of this run was not removed", list.Items[0].ID)
	}
}

func find(run report.Run, check, subject string) *report.Finding {
	for i, f := range run.Findings {
		if f.Check == check && f.Subject == subject {
			return &run.Findings[i]
		}
	}
	return nil
}

func names(fs []report.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Name()+"="+string(f.Status))
	}
	return out
}

// TestScratchImage: an image holding nothing but the static probe meets the
// scratch policy under runc and under real gVisor. Under gVisor the one
// expected failure is caps.seccomp (runsc does not load the OCI profile
// without --oci-seccomp), with the fix that says so.
func TestScratchImage(t *testing.T) {
	e := newEngine(t)
	testenv.ScratchImage(t, e.host, scratchImage)
	for _, rt := range []string{"runc", gvisor} {
		t.Run(rt, func(t *testing.T) {
			testenv.DockerRuntime(t, e.host, rt)
			p, raw := loadFixture(t, "scratch-policy.yaml")
			run, err := e.verify(t, &docker.Backend{Image: scratchImage, Runtime: rt}, p, raw, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range run.Findings {
				want := report.Pass
				if rt == gvisor && f.Check == "caps.seccomp" {
					want = report.Fail
					if !strings.Contains(f.Fix, "--oci-seccomp") {
						t.Errorf("caps.seccomp under gVisor: fix %q does not name --oci-seccomp", f.Fix)
					}
				}
				if f.Status != want {
					t.Errorf("%s: %s, want %s — %s (%s)", f.Name(), f.Status, want, report.ExpectedActual(f), f.Evidence)
				}
			}
			for _, check := range []string{"fs.root-readonly", "fs.writable", "fs.empty-at-start", "identity.uid", "caps.sets", "caps.no-new-privs", "runtime.isolation"} {
				if !strings.Contains(strings.Join(names(run.Findings), " "), check) {
					t.Errorf("no %s finding: %v", check, names(run.Findings))
				}
			}
			if rt == gvisor && find(run, "runtime.isolation", runner.HostKernelSubject) == nil {
				t.Error("under gVisor the runner did not compare the kernel with the host's")
			}
		})
	}
}

// TestRuntimeIsolation: the same policy (class "gvisor") passes when the
// engine runs the image under runsc, and fails — from inside and by the
// host-kernel comparison — when it runs under runc.
func TestRuntimeIsolation(t *testing.T) {
	e := newEngine(t)
	testenv.DockerImage(t, e.host, debianImage)
	testenv.DockerRuntime(t, e.host, gvisor)
	cases := []struct {
		name, runtime, class string
		want                 report.Status
		subject, actual      string
	}{
		{"gvisor class under runsc", gvisor, "gvisor", report.Pass, "gvisor", "gVisor, kernel 4.4.0"},
		{"gvisor class under runc", "runc", "gvisor", report.Fail, "gvisor", "a VM, kernel "},
		{"runc is not a declared class", "runc", "", report.Fail, "runc", "which the policy does not declare"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, raw := loadFixture(t, "image-policy.yaml")
			be := &docker.Backend{Image: debianImage, Runtime: c.runtime, RuntimeClass: c.class, Env: []string{"HOME=/tmp"}}
			run, err := e.verify(t, be, p, raw, 0)
			if err != nil {
				t.Fatal(err)
			}
			inside := find(run, "runtime.isolation", c.subject)
			if inside == nil {
				t.Fatalf("no runtime.isolation %s: %v", c.subject, names(run.Findings))
			}
			if inside.Status != c.want || !strings.Contains(inside.Actual, c.actual) {
				t.Errorf("inside: %s %q, want %s %q (%s)", inside.Status, inside.Actual, c.want, c.actual, inside.Evidence)
			}
			outside := find(run, "runtime.isolation", runner.HostKernelSubject)
			if outside == nil || outside.Status != c.want {
				t.Fatalf("host-kernel comparison %+v, want %s", outside, c.want)
			}
			if c.want == report.Fail {
				if !strings.Contains(outside.Actual, "host's own kernel") || inside.Fix == "" || outside.Fix == "" {
					t.Errorf("failures need actual and fix: %+v / %+v", inside, outside)
				}
				if run.ExitCode() != report.ExitNonConformant {
					t.Errorf("exit %d, want 1", run.ExitCode())
				}
			}
			t.Logf("%s: %s | %s: %s", inside.Name(), inside.Actual, outside.Name(), outside.Actual)
		})
	}
}

// TestSabotagedImages: each broken image is caught by the check meant for it,
// with expected, actual and a fix that names the cause.
func TestSabotagedImages(t *testing.T) {
	e := newEngine(t)
	cases := []struct {
		name, image, runtime string
		env                  []string
		check, subject       string
		actual, fix          string
	}{
		{name: "Chromium missing", image: noChromiumImage, runtime: "runc", env: []string{"HOME=/tmp"},
			check: "browser.screenshot", subject: "locate", actual: "none of chromium", fix: "apt-get install chromium"},
		{name: "/tmp mode 0755 in the image", image: tmp0755Image, runtime: "runc", env: []string{"HOME=/tmp"},
			check: "fs.writable", subject: "/tmp", actual: "EACCES", fix: "the image's /tmp is mode 0755"},
		{name: "/tmp mode 0755 breaks the browser's profile", image: tmp0755Image, runtime: "runc", env: []string{"HOME=/tmp"},
			check: "browser.screenshot", subject: "profile", actual: "cannot create a fresh profile directory under /tmp", fix: "chmod 1777"},
		{name: "declared tool missing", image: noGitImage, runtime: "runc", env: []string{"HOME=/tmp"},
			check: "tools.run", subject: "git", actual: "not found on PATH", fix: "install git in the image"},
		{name: "tool built for root only", image: rootOnlyImage, runtime: "runc", env: []string{"HOME=/tmp"},
			check: "tools.run", subject: "git", actual: "is in the image but uid 65532 may not run it (mode 0700, owner 0:0)", fix: "chmod 0755 /usr/bin/git"},
		{name: "tool built for root only, under gVisor", image: rootOnlyImage, runtime: gvisor, env: []string{"HOME=/tmp"},
			check: "tools.run", subject: "git", actual: "uid 65532 may not run it", fix: "make it executable for uid 65532"},
		{name: "entrypoint needs a writable root", image: writableRootImage, runtime: "runc", env: []string{"HOME=/tmp"},
			check: "image.entrypoint", subject: "/usr/local/bin/sandprobe-app-start", actual: "writes /var/run/sandprobe-app/pid on the read-only root", fix: "the entrypoint needs a writable root"},
		{name: "entrypoint needs a writable root, under gVisor", image: writableRootImage, runtime: gvisor, env: []string{"HOME=/tmp"},
			check: "image.entrypoint", subject: "/usr/local/bin/sandprobe-app-start", actual: "on the read-only root", fix: "spec.filesystem.writable"},
		{name: "no writable HOME, under gVisor", image: debianImage, runtime: gvisor,
			check: "browser.screenshot", subject: "launch", actual: "HOME /home/nonroot is not writable", fix: "give the sandbox a writable HOME"},
		{name: "gvisor policy run under runc", image: debianImage, runtime: "runc", env: []string{"HOME=/tmp"},
			check: "runtime.isolation", subject: runner.HostKernelSubject, actual: "host's own kernel", fix: "not under runc"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			testenv.DockerImage(t, e.host, c.image)
			testenv.DockerRuntime(t, e.host, c.runtime)
			p, raw := loadFixture(t, "image-policy.yaml")
			be := &docker.Backend{Image: c.image, Runtime: c.runtime, RuntimeClass: "gvisor", Env: c.env, EntrypointTimeout: probes.DefaultImageCommandTimeout}
			run, err := e.verify(t, be, p, raw, 0)
			if err != nil {
				t.Fatal(err)
			}
			f := find(run, c.check, c.subject)
			if f == nil {
				t.Fatalf("no finding %s %q; findings: %v", c.check, c.subject, names(run.Findings))
			}
			if f.Status != report.Fail {
				t.Fatalf("%s: %s, want fail (%s; %s)", f.Name(), f.Status, report.ExpectedActual(*f), f.Evidence)
			}
			if f.Expected == "" || !strings.Contains(f.Actual, c.actual) || !strings.Contains(f.Fix, c.fix) {
				t.Errorf("%s: expected %q, actual %q (want %q), fix %q (want %q)", f.Name(), f.Expected, f.Actual, c.actual, f.Fix, c.fix)
			}
			if run.ExitCode() != report.ExitNonConformant {
				t.Errorf("exit %d, want 1", run.ExitCode())
			}
			t.Logf("%s: %s; fix: %s", f.Name(), report.ExpectedActual(*f), f.Fix)
		})
	}
}

// TestOOMEvent: the engine's "oom" event names a container the kernel's
// OOM killer reached under its memory limit, whether or not the engine's
// OOMKilled flag caught it (Docker 20.10 drops the flag when the runtime's
// OOM event lands after the exit, as a CI run saw); a container killed
// with SIGKILL under the same limit has none.
func TestOOMEvent(t *testing.T) {
	e := newEngine(t)
	testenv.DockerImage(t, e.host, debianImage)
	ctx := context.Background()
	be := &docker.Backend{Client: e.cli}
	for _, c := range []struct {
		name string
		cmd  string
		oom  bool
	}{
		{"out of memory", "tail /dev/zero", true},
		{"killed", "sh -c 'kill -KILL $$'; exit $?", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := &container.Config{Image: debianImage, Cmd: []string{"/bin/sh", "-c", c.cmd}}
			host := &container.HostConfig{Resources: container.Resources{Memory: 32 << 20, MemorySwap: 32 << 20}, NetworkMode: "none"}
			created, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: host})
			if err != nil {
				t.Fatal(err)
			}
			id := created.ID
			t.Cleanup(func() {
				_, _ = e.cli.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
			})
			wait := e.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
			if _, err := e.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-wait.Result:
			case err := <-wait.Error:
				t.Fatal(err)
			}
			st, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
			if err != nil || st.Container.State.ExitCode != 137 {
				t.Fatalf("exit %d, %v: want 137", st.Container.State.ExitCode, err)
			}
			got := false
			for range 50 { // the event may land seconds after the exit on a loaded machine
				if got = docker.OOMEvent(be, ctx, id, st.Container.State.StartedAt); got || !c.oom {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if got != c.oom {
				t.Fatalf("oom event %v, want %v (OOMKilled flag %v)", got, c.oom, st.Container.State.OOMKilled)
			}
		})
	}
}

// TestFailsClosed: a probe container that cannot start, crashes, hangs, prints
// garbage or lies is a could-not-run error with a named reason, and its
// container is removed all the same.
func TestFailsClosed(t *testing.T) {
	e := newEngine(t)
	testenv.DockerImage(t, e.host, debianImage)
	probe := docker.ProbePath + " probe --policy " + docker.PolicyPath
	cases := []struct {
		name     string
		image    string
		runtime  string
		binary   string
		cmd      string
		deadline time.Duration
		memory   string
		reason   string
	}{
		{name: "image missing", image: "sandprobe/no-such-image:test", reason: runner.ReasonImageMissing},
		{name: "runtime not registered", runtime: "kata-nonexistent", reason: runner.ReasonLaunch},
		{name: "dynamic probe binary", binary: "/bin/ls", reason: runner.ReasonLaunch},
		{name: "command not found", cmd: "exec /no/such/probe", reason: runner.ReasonLaunch},
		// The shell is the container's PID 1, which ignores signals it has no
		// handler for: the crash happens in its child.
		{name: "crash", cmd: "sh -c 'kill -SEGV $$'; exit $?", reason: runner.ReasonCrashed},
		// SIGKILLed under a memory limit, with no OOM: the engine's flag and
		// its "oom" event are both asked, and neither makes it an OOM.
		{name: "killed under a memory limit", cmd: "sh -c 'kill -KILL $$'; exit $?", memory: "64Mi", reason: runner.ReasonCrashed},
		{name: "odd exit code", cmd: "exit 42", reason: runner.ReasonCrashed},
		{name: "hang past the deadline", cmd: "sleep 60", deadline: 3 * time.Second, reason: runner.ReasonDeadline},
		{name: "out of memory", cmd: "tail /dev/zero", memory: "24Mi", reason: runner.ReasonOOM},
		{name: "garbage", cmd: "echo 'everything is fine'", reason: runner.ReasonGarbled},
		{name: "nothing printed", cmd: "exit 0", reason: runner.ReasonNoResult},
		{name: "truncated result", cmd: probe + " --nonce NONCE | head -c 300", reason: runner.ReasonTruncated},
		{name: "wrong nonce", cmd: probe + " --nonce stale-nonce-from-yesterday", reason: runner.ReasonWrongNonce},
		{name: "exit code lies", cmd: probe + " --nonce NONCE --only identity; exit 1", reason: runner.ReasonInconsistentExit},
		{name: "policy rejected", cmd: "echo 'spec: bad' | " + docker.ProbePath + " probe --policy - --nonce NONCE", reason: runner.ReasonBadPolicy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, raw := loadFixture(t, "scratch-policy.yaml")
			if c.memory != "" {
				p.Spec.Resources.Limits = map[string]string{"memory": c.memory}
			}
			image := debianImage
			if c.image != "" {
				image = c.image
			}
			be := &docker.Backend{Image: image, Runtime: c.runtime, Binary: c.binary}
			if c.cmd != "" {
				be.Command = []string{"/bin/sh", "-c", strings.ReplaceAll(c.cmd, "NONCE", nonce(t))}
			}
			deadline := c.deadline
			if deadline == 0 {
				deadline = 30 * time.Second
			}
			start := time.Now()
			run, err := e.verify(t, be, p, raw, deadline)
			if err == nil {
				t.Fatalf("no error; findings %v", names(run.Findings))
			}
			var cnr *runner.CouldNotRun
			if !errors.As(err, &cnr) {
				t.Fatalf("error %v is not a CouldNotRun", err)
			}
			if cnr.Reason != c.reason {
				t.Fatalf("reason %q, want %q (%v)", cnr.Reason, c.reason, err)
			}
			f := cnr.Finding()
			if f.Status != report.Error || f.Actual == "" || f.Fix == "" {
				t.Errorf("finding %+v", f)
			}
			if c.deadline > 0 && time.Since(start) > c.deadline+20*time.Second {
				t.Errorf("took %s past a %s deadline", time.Since(start), c.deadline)
			}
			t.Logf("%s: %s", cnr.Reason, cnr.Detail)
		})
	}
}

// TestInterruptRemovesContainer: ctrl-C while the probe runs still removes
// the container (the removal gets a context of its own).
func TestInterruptRemovesContainer(t *testing.T) {
	e := newEngine(t)
	testenv.DockerImage(t, e.host, debianImage)
	p, raw := loadFixture(t, "scratch-policy.yaml")
	started := make(chan struct{}, 1)
	be := &docker.Backend{Client: e.cli, Image: debianImage, Binary: testenv.Binary(t), Command: []string{"sleep", "60"},
		Progress: func(msg string) {
			if strings.HasPrefix(msg, "probe running") {
				select {
				case started <- struct{}{}:
				default:
				}
			}
		}}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
		}
		cancel()
	}()
	spec := runner.ProbeSpec{Policy: p, PolicyBytes: raw, Nonce: nonce(t), Deadline: time.Minute}
	_, err := be.Run(ctx, spec)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	e.requireRemoved(t, spec.Nonce)
}

func TestMain(m *testing.M) {
	// The tests talk to the engine through DOCKER_HOST-less clients built
	// with an explicit host; keep a stray DOCKER_API_VERSION from pinning
	// a version the test engine does not speak.
	os.Unsetenv("DOCKER_API_VERSION")
	if os.Getenv(childEnv) != "" {
		runSweepChild()
	}
	if os.Getenv(labServerEnv) != "" {
		runLabServer()
	}
	os.Exit(m.Run())
}

// TestWritableRootFailsEverywhere: fs.root-readonly reads gVisor's mount table
// and permitted writes, and that must not soften it: a root left writable
// fails under runc and under gVisor, in a scratch image (where the uid can
// write nowhere on the root) and in Debian (where it can write its HOME).
func TestWritableRootFailsEverywhere(t *testing.T) {
	e := newEngine(t)
	testenv.ScratchImage(t, e.host, scratchImage)
	for _, image := range []string{scratchImage, debianImage} {
		for _, rt := range []string{"runc", gvisor} {
			t.Run(image+" "+rt, func(t *testing.T) {
				testenv.DockerImage(t, e.host, image)
				testenv.DockerRuntime(t, e.host, rt)
				strict, raw := loadFixture(t, "scratch-policy.yaml")
				// The container is built from a copy that leaves the root
				// writable; the probe is handed the strict policy.
				loose := *strict
				loose.Spec.Filesystem.ReadOnlyRoot = false
				run, err := e.verify(t, &docker.Backend{Image: image, Runtime: rt}, &loose, raw, 0)
				if err != nil {
					t.Fatal(err)
				}
				f := find(run, "fs.root-readonly", "/")
				if f == nil || f.Status != report.Fail || f.Fix == "" {
					t.Fatalf("fs.root-readonly: %+v", f)
				}
				t.Logf("%s: %s (%s)", f.Name(), f.Actual, f.Evidence)
			})
		}
	}
}
