package drift_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// The private test dockerd (hack/docker/up.sh on this machine).
const defaultDockerHost = "unix:///run/sandprobe-docker/docker.sock"

const (
	testImage   = "sandprobe/drift-probe:test"
	testNetwork = "sandprobe-drift-internal" // as fixtures/docker-policy.yaml declares
	openNetwork = "sandprobe-drift-open"
)

// dockerCase is a container created from the rendered argv with one
// property broken (or, for the bastion, with everything a lazy operator
// does), and the checks that must name it, with multiplicity.
type dockerCase struct {
	name   string
	expect []string
	// argv turns the rendered `docker run` flags into this case's flags.
	argv func(flags []string, env *dockerEnv) []string
	// policy tweaks the policy this case is judged against.
	policy func(p *policy.Policy)
	start  bool
	// liveOnly: offline `docker inspect` cannot show it (whether a network
	// is internal needs the network's own inspect).
	liveOnly bool
}

// dockerEnv is what the cases need from the test's surroundings.
type dockerEnv struct {
	credSource string // the declared credential's source on this host
	runLabel   string // k=v that isolates this run's containers
	volume     string // a named volume: the phases' shared workspace
}

func without(flags []string, name string, valuePrefix string) []string {
	var out []string
	for i := 0; i < len(flags); i++ {
		if flags[i] == name && (valuePrefix == "-" || (i+1 < len(flags) && strings.HasPrefix(flags[i+1], valuePrefix))) {
			if valuePrefix != "-" {
				i++
			}
			continue
		}
		out = append(out, flags[i])
	}
	return out
}

func replaceValue(flags []string, name, value string) []string {
	out := append([]string(nil), flags...)
	for i := range out {
		if out[i] == name && i+1 < len(out) {
			out[i+1] = value
		}
	}
	return out
}

func dockerCases() []dockerCase {
	same := func(f []string, _ *dockerEnv) []string { return f }
	add := func(extra ...string) func([]string, *dockerEnv) []string {
		return func(f []string, _ *dockerEnv) []string { return append(append([]string(nil), f...), extra...) }
	}
	return []dockerCase{
		{name: "rendered", argv: same, start: true},
		{name: "bastion", expect: []string{
			drift.DockerReadOnlyRoot, drift.DockerCapDrop, drift.DockerCapAdd, drift.DockerNoNewPrivileges,
			drift.DockerPids, drift.DockerMemory, drift.DockerCPU, drift.DockerNetwork, drift.DockerUser,
			drift.DockerProxy, drift.DockerTmpfs,
			drift.DockerSensitiveMount, drift.DockerSensitiveMount, drift.DockerSensitiveMount,
			drift.DockerCredential,
			drift.DockerSecretEnv, drift.DockerSecretEnv, // one per secret in its environment
		}, argv: func(_ []string, env *dockerEnv) []string {
			// Root, the default network, the Docker socket, ~/.kube and ~/.aws,
			// NET_ADMIN, no limits, no proxy, no tmpfs, no declared credential.
			return []string{"--label", "sandbox=true", "--label", env.runLabel,
				"-v", "/var/run/docker.sock:/var/run/docker.sock",
				"-v", "/home/ops/.kube:/root/.kube",
				"-v", "/home/ops/.aws:/root/.aws:ro",
				"--cap-add", "NET_ADMIN",
				"-e", "AWS_SECRET_ACCESS_KEY=not-a-real-key", "-e", "GITHUB_TOKEN=not-a-real-token", "-e", "TERM=xterm",
			}
		}},
		{name: "no-read-only", expect: []string{drift.DockerReadOnlyRoot}, argv: func(f []string, _ *dockerEnv) []string { return without(f, "--read-only", "-") }},
		{name: "no-cap-drop", expect: []string{drift.DockerCapDrop}, argv: func(f []string, _ *dockerEnv) []string { return without(f, "--cap-drop", "ALL") }},
		{name: "cap-add", expect: []string{drift.DockerCapAdd}, argv: add("--cap-add", "SYS_PTRACE")},
		{name: "no-new-privileges", expect: []string{drift.DockerNoNewPrivileges}, argv: func(f []string, _ *dockerEnv) []string {
			return without(f, "--security-opt", "no-new-privileges")
		}},
		{name: "pids", expect: []string{drift.DockerPids}, argv: func(f []string, _ *dockerEnv) []string { return replaceValue(f, "--pids-limit", "4096") }},
		{name: "memory", expect: []string{drift.DockerMemory}, argv: func(f []string, _ *dockerEnv) []string { return without(f, "--memory", "") }},
		{name: "cpu", expect: []string{drift.DockerCPU}, argv: func(f []string, _ *dockerEnv) []string { return replaceValue(f, "--cpus", "2") }},
		{name: "network-none", expect: []string{drift.DockerNetwork}, argv: func(f []string, _ *dockerEnv) []string { return replaceValue(f, "--network", "none") }},
		{name: "network-not-internal", expect: []string{drift.DockerNetwork}, argv: func(f []string, _ *dockerEnv) []string {
			return replaceValue(f, "--network", openNetwork)
		}, policy: func(p *policy.Policy) { p.Spec.Docker.Network = openNetwork }, liveOnly: true},
		{name: "user-root", expect: []string{drift.DockerUser}, argv: func(f []string, _ *dockerEnv) []string { return replaceValue(f, "--user", "0:0") }},
		{name: "proxy", expect: []string{drift.DockerProxy}, argv: func(f []string, _ *dockerEnv) []string { return without(f, "-e", "https_proxy=") }},
		{name: "tmpfs", expect: []string{drift.DockerTmpfs}, argv: func(f []string, _ *dockerEnv) []string { return without(f, "--tmpfs", "/tmp") }},
		{name: "docker-sock", expect: []string{drift.DockerSensitiveMount}, argv: add("-v", "/var/run/docker.sock:/var/run/docker.sock:ro")},
		{name: "credential-rw", expect: []string{drift.DockerCredential}, argv: func(f []string, env *dockerEnv) []string {
			return replaceValue(f, "--mount", "type=bind,src="+env.credSource+",dst=/run/secrets/git-token")
		}},
		{name: "secret-env", expect: []string{drift.DockerSecretEnv}, argv: add("-e", "OPENAI_API_KEY=sk-not-a-real-key")},
		{name: "privileged", expect: []string{drift.DockerPrivileged}, argv: add("--privileged")},
		{name: "host-pid", expect: []string{drift.DockerHostNamespaces}, argv: add("--pid", "host")},
		{name: "seccomp", expect: []string{drift.DockerSeccomp}, argv: add("--security-opt", "seccomp=unconfined")},
		{name: "apparmor", expect: []string{drift.DockerAppArmor}, argv: add("--security-opt", "apparmor=unconfined")},
		{name: "device", expect: []string{drift.DockerDevices}, argv: add("--device", "/dev/null:/dev/xnull")},
		{name: "runtime", expect: []string{drift.DockerRuntime}, argv: same, policy: func(p *policy.Policy) { p.Spec.Runtime.ClassNames = []string{"runsc-nonet"} }},
		{name: "image-digest", expect: []string{drift.DockerImageDigest}, argv: same, policy: func(p *policy.Policy) { p.Spec.Image.RequireDigest = true }},
		// A phase's container: the attempt's volume at /workspace. HOME on
		// it, and XDG_CONFIG_HOME on a second mount of it, hand the next
		// phase this one's dotfiles; HOME on a tmpfs does not.
		{name: "home-on-workspace", expect: []string{drift.DockerHomeOnWorkspace, drift.DockerHomeOnWorkspace}, argv: func(f []string, env *dockerEnv) []string {
			return append(without(f, "--tmpfs", "/workspace"), "-v", env.volume+":/workspace", "-v", env.volume+":/srv/dotfiles",
				"-e", "HOME=/workspace", "-e", "XDG_CONFIG_HOME=/srv/dotfiles/config")
		}, policy: phasedDocker},
		{name: "home-off-workspace", argv: func(f []string, env *dockerEnv) []string {
			return append(without(f, "--tmpfs", "/workspace"), "-v", env.volume+":/workspace", "-e", "HOME=/tmp/home", "-e", "XDG_STATE_HOME=/workspace/.state")
		}, policy: phasedDocker},
	}
}

// phasedDocker makes /workspace the phases' shared volume rather than a
// fresh tmpfs.
func phasedDocker(p *policy.Policy) {
	p.Spec.Phases.Workspace = "/workspace"
	p.Spec.Filesystem.Writable = []string{"/tmp"}
	p.Spec.Filesystem.EmptyAtStart = nil
}

// dockerPolicy loads fixtures/docker-policy.yaml, optionally tweaked.
func dockerPolicy(t testing.TB, tweak func(*policy.Policy)) *policy.Policy {
	p := loadPolicy(t, "docker-policy.yaml")
	if tweak != nil {
		tweak(p)
	}
	return p
}

// TestDockerInspectFixtures checks the `docker inspect` files saved from the
// real engine (fixtures/drift/docker/*.json, rewritten by TestDockerLive
// -update) offline: the same findings as live.
func TestDockerInspectFixtures(t *testing.T) {
	for _, c := range dockerCases() {
		t.Run(c.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(repoRoot(), "fixtures", "drift", "docker", c.name+".json"))
			if err != nil {
				t.Fatalf("%v (regenerate with go test ./drift -run TestDockerLive -update)", err)
			}
			e, err := drift.NewEngine(dockerPolicy(t, c.policy))
			if err != nil {
				t.Fatal(err)
			}
			col := drift.NewCollector()
			if err := drift.CheckInspectFile(e, data, c.name+".json", col); err != nil {
				t.Fatal(err)
			}
			if c.liveOnly {
				c.expect = nil
			}
			assertDockerFindings(t, c, offlineJudged(t, dockerPolicy(t, c.policy), data, col.Findings))
		})
	}
}

// offlineJudged checks that an offline run says, for a container on the
// declared network, that it could not tell whether that network is
// --internal (a skip naming the live check, never a silent pass), and
// returns the other findings.
func offlineJudged(t *testing.T, p *policy.Policy, inspect []byte, fs []report.Finding) []report.Finding {
	t.Helper()
	cs, err := drift.ParseDockerInspect(inspect)
	if err != nil {
		t.Fatal(err)
	}
	onDeclared := cs[0].HostConfig.NetworkMode == p.Spec.Docker.Network
	var judged []report.Finding
	notChecked := 0
	for _, f := range fs {
		if f.Check == drift.DockerNetwork && f.Status == report.Skip {
			notChecked++
			if !strings.Contains(f.Actual, "not checked") || !strings.Contains(f.Fix, "--docker") {
				t.Errorf("offline network skip does not say it was not checked: %+v", f)
			}
			continue
		}
		judged = append(judged, f)
	}
	if onDeclared != (notChecked == 1) {
		t.Errorf("offline: %d 'not checked' findings for a container on network %s (declared %s)", notChecked, cs[0].HostConfig.NetworkMode, p.Spec.Docker.Network)
	}
	return judged
}

func assertDockerFindings(t *testing.T, c dockerCase, fs []report.Finding) {
	t.Helper()
	var got []string
	for _, f := range fs {
		if f.Status != report.Pass {
			got = append(got, f.Check)
			if f.Expected == "" || f.Actual == "" || f.Fix == "" || f.Evidence == "" || !strings.HasPrefix(f.Target, "container/") {
				t.Errorf("incomplete finding %+v", f)
			}
		}
	}
	want := append([]string(nil), c.expect...)
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		var b strings.Builder
		for _, f := range fs {
			fmt.Fprintf(&b, "  %s %s: %s\n", f.Check, f.Subject, report.ExpectedActual(f))
		}
		t.Errorf("%d findings %v\nwant %d %v\n%s", len(got), got, len(want), want, b.String())
	}
}

func TestParseDockerInspect(t *testing.T) {
	for _, c := range []struct{ name, in, err string }{
		{"empty", "", "empty"},
		{"not json", "[{", "decode docker inspect list"},
		{"not a container", `[{"foo": 1}]`, "not a container"},
		{"object", `{"Id": "abc", "Name": "/x"}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := drift.ParseDockerInspect([]byte(c.in))
			if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
		})
	}
}

// dockerHarness is a reachable Docker engine and its CLI.
type dockerHarness struct {
	host, cli string
	api       *client.Client
}

func needDocker(t *testing.T) *dockerHarness {
	t.Helper()
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = defaultDockerHost
	}
	cli := "/usr/bin/docker" // the CLI that matches the Debian daemon
	if _, err := os.Stat(cli); err != nil {
		if cli, err = exec.LookPath("docker"); err != nil {
			testenv.Missing(t, "no docker CLI")
		}
	}
	api, err := client.New(client.WithHost(host))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := api.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		testenv.Missing(t, fmt.Sprintf("docker engine %s not reachable (start it with hack/docker/up.sh): %v", host, err))
	}
	t.Cleanup(func() { api.Close() })
	return &dockerHarness{host: host, cli: cli, api: api}
}

func (h *dockerHarness) docker(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command(h.cli, args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+h.host)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// importImage imports a scratch image holding the static sandprobe binary
// (plus /tmp 1777 and /workspace for uid 65532), as hack/images does.
func (h *dockerHarness) importImage(t *testing.T) {
	bin, err := os.ReadFile(testenv.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []tar.Header{
		{Name: "sandprobe", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg},
		{Name: "tmp/", Mode: 0o1777, Typeflag: tar.TypeDir},
		{Name: "workspace/", Mode: 0o755, Uid: 65532, Gid: 65532, Typeflag: tar.TypeDir},
		{Name: "run/", Mode: 0o755, Typeflag: tar.TypeDir},
		{Name: "run/secrets/", Mode: 0o755, Typeflag: tar.TypeDir},
	} {
		e.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(&e); err != nil {
			t.Fatal(err)
		}
		if e.Typeflag == tar.TypeReg {
			tw.Write(bin)
		}
	}
	tw.Close()
	id := h.docker(t, buf.Bytes(), "import", "--change", `ENTRYPOINT ["/sandprobe"]`, "--change", "WORKDIR /workspace", "-", testImage)
	// Runs after the containers are removed (cleanups run last-in first-out);
	// the next import re-tags, so this image would only dangle.
	t.Cleanup(func() {
		cmd := exec.Command(h.cli, "image", "rm", id)
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+h.host)
		_ = cmd.Run() // best effort: a concurrent run may still use it
	})
}

func (h *dockerHarness) ensureNetwork(t *testing.T, name string, internal bool) {
	if out := h.docker(t, nil, "network", "ls", "-q", "--filter", "name=^"+name+"$"); out != "" {
		return
	}
	args := []string{"network", "create"}
	if internal {
		args = append(args, "--internal")
	}
	h.docker(t, nil, append(args, "--label", "sandprobe.dev/test=drift", name)...)
}

// TestDockerLive creates the cases' containers on the real engine (created,
// never started, except the rendered one), checks them live through the
// Docker API, and checks `docker inspect` of each offline. The bastion gives
// exactly the 15 findings (+1 per secret); the container started from
// `sandprobe render --format docker-json` gives none.
func TestDockerLive(t *testing.T) {
	h := needDocker(t)
	h.importImage(t)
	h.ensureNetwork(t, testNetwork, true)
	h.ensureNetwork(t, openNetwork, false)
	// A network with a route out must not outlive the test (its containers
	// are only created, and removed before this runs).
	t.Cleanup(func() {
		cmd := exec.Command(h.cli, "network", "rm", openNetwork)
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+h.host)
		_ = cmd.Run() // best effort: a concurrent run may still use it
	})

	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	env := &dockerEnv{runLabel: "sandprobe.dev/drift-run=" + runID}
	dir := t.TempDir()
	env.credSource = filepath.Join(dir, "git-token")
	if err := os.WriteFile(env.credSource, []byte("placeholder"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The rendered argv, from the CLI as a user would get it.
	code, out, stderr := testenv.Exec(t, testenv.Binary(t), "render", "--policy", filepath.Join(repoRoot(), "fixtures", "docker-policy.yaml"),
		"--format", "docker-json", "--image", testImage, "--probe-image", testImage, "--name", "X")
	if code != 0 {
		t.Fatalf("render: exit %d: %s", code, stderr)
	}
	var argv []string
	if err := json.Unmarshal([]byte(out), &argv); err != nil {
		t.Fatal(err)
	}
	i := slices.Index(argv, testImage)
	if argv[0] != "docker" || argv[1] != "run" || i < 0 {
		t.Fatalf("unexpected argv %v", argv)
	}
	flags := argv[2:i]
	// Not interactive, not removed (it must be inspected), our run label,
	// and the credential from this test's temp dir.
	flags = without(without(flags, "--rm", "-"), "-i", "-")
	flags = without(flags, "--name", "X")
	flags = append(flags, "--label", env.runLabel)
	flags = replaceValue(flags, "--mount", "type=bind,src="+env.credSource+",dst=/run/secrets/git-token,readonly")

	env.volume = "sandprobe-drift-ws-" + runID
	// Runs after the containers are removed (cleanups run last-in first-out).
	t.Cleanup(func() {
		cmd := exec.Command(h.cli, "volume", "rm", "-f", env.volume)
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+h.host)
		_ = cmd.Run() // best effort: absent when no case ran
	})
	t.Cleanup(func() {
		ids := h.docker(t, nil, "ps", "-aq", "--filter", "label="+env.runLabel)
		if ids != "" {
			h.docker(t, nil, append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
		}
	})
	for _, c := range dockerCases() {
		t.Run(c.name, func(t *testing.T) {
			name := "sandprobe-drift-" + c.name + "-" + runID
			args := append([]string{"create", "--name", name}, c.argv(flags, env)...)
			// `version` keeps the started container from probing anything.
			args = append(args, testImage, "version")
			id := h.docker(t, nil, args...)
			if c.start {
				h.docker(t, nil, "start", id)
			}
			p := dockerPolicy(t, c.policy)
			p.Spec.Credentials[0].Source = env.credSource
			// Only this run's containers: the engine is shared.
			p.Spec.Selector.MatchLabels["sandprobe.dev/drift-run"] = runID
			e, err := drift.NewEngine(p)
			if err != nil {
				t.Fatal(err)
			}
			col := drift.NewCollector()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := (&drift.DockerScan{API: h.api, Engine: e}).Run(ctx, col); err != nil {
				t.Fatal(err)
			}
			var mine []report.Finding
			for _, f := range col.Findings {
				if f.Target == "container/"+name {
					mine = append(mine, f)
				}
			}
			assertDockerFindings(t, c, mine)

			raw := h.docker(t, nil, "inspect", id)
			if *update {
				fixture := strings.ReplaceAll(raw, env.credSource, "/var/lib/sandprobe-creds/git-token")
				fixture = strings.ReplaceAll(fixture, "-"+runID, "")
				path := filepath.Join(repoRoot(), "fixtures", "drift", "docker", c.name+".json")
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(fixture+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			off := drift.NewCollector()
			if err := drift.CheckInspectFile(e, []byte(raw), "inspect", off); err != nil {
				t.Fatal(err)
			}
			// Offline cannot tell whether a network is internal: that one
			// finding is live-only, and offline says it did not check it
			// (a skip, never a silent pass) for every container on the
			// declared network.
			oc := c
			if c.liveOnly {
				oc.expect = nil
			}
			assertDockerFindings(t, oc, offlineJudged(t, p, []byte(raw), off.Findings))
		})
	}
}

// TestDockerNothingFound: an engine holding no container with the
// selector's labels is not a clean run: drift.scan.sandboxes-found fails,
// from the CLI too (exit 1).
func TestDockerNothingFound(t *testing.T) {
	h := needDocker(t)
	p := dockerPolicy(t, func(p *policy.Policy) {
		p.Spec.Selector.MatchLabels["sandprobe.dev/drift-run"] = fmt.Sprintf("nobody-%d", time.Now().UnixNano())
	})
	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	col := drift.NewCollector()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := (&drift.DockerScan{API: h.api, Engine: e, Source: "the test engine"}).Run(ctx, col); err != nil {
		t.Fatal(err)
	}
	col.Summary(p)
	failed := 0
	for _, f := range col.Findings {
		switch {
		case f.Check == drift.ScanSandboxesFound && f.Status == report.Fail:
			failed++
		case f.Status == report.Pass:
			t.Errorf("a pass with nothing found: %s %s", f.Check, f.Actual)
		}
	}
	if failed != 1 {
		t.Fatalf("want one failing %s, got %+v", drift.ScanSandboxesFound, col.Findings)
	}
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	raw, _ := os.ReadFile(filepath.Join(repoRoot(), "fixtures", "docker-policy.yaml"))
	doc := strings.Replace(string(raw), `selector: {matchLabels: {sandbox: "true"}}`, `selector: {matchLabels: {sandbox: "true", sandprobe.dev/drift-run: nobody-at-all}}`, 1)
	if err := os.WriteFile(policyFile, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := testenv.Exec(t, testenv.Binary(t), "drift", "--policy", policyFile, "--docker", "--docker-host", h.host)
	if code != report.ExitNonConformant || !strings.Contains(stdout, drift.ScanSandboxesFound) {
		t.Errorf("drift --docker with nothing to find: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// TestDockerSharedWorkspaceIsNoMissingTmpfs: a phase's container whose
// declared writable paths include the phases' workspace gets it as the
// shared volume, by design — no drift.docker.tmpfs for it (a false alarm on
// every healthy phased container before). The same path with neither a
// tmpfs nor the volume still fails.
func TestDockerSharedWorkspaceIsNoMissingTmpfs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(), "fixtures", "drift", "docker", "home-off-workspace.json"))
	if err != nil {
		t.Fatal(err)
	}
	phasedWritable := func(p *policy.Policy) {
		phasedDocker(p)
		p.Spec.Filesystem.Writable = []string{"/tmp", "/workspace"}
	}
	unmounted := strings.NewReplacer(`"/workspace"`, `"/elsewhere"`, `:/workspace"`, `:/elsewhere"`).Replace(string(data))
	for _, tc := range []struct {
		name   string
		data   string
		policy func(*policy.Policy)
		want   bool
	}{
		{"the workspace volume at /workspace", string(data), phasedWritable, false},
		{"nothing at /workspace", unmounted, phasedWritable, true},
		{"no phases: the volume is no tmpfs", string(data), func(p *policy.Policy) {
			phasedWritable(p)
			p.Spec.Phases.Workspace = ""
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := drift.NewEngine(dockerPolicy(t, tc.policy))
			if err != nil {
				t.Fatal(err)
			}
			col := drift.NewCollector()
			if err := drift.CheckInspectFile(e, []byte(tc.data), "c.json", col); err != nil {
				t.Fatal(err)
			}
			got := false
			for _, f := range col.Findings {
				if f.Check == drift.DockerTmpfs && f.Status == report.Fail {
					got = true
				}
			}
			if got != tc.want {
				t.Errorf("drift.docker.tmpfs failed = %v, want %v: %+v", got, tc.want, col.Findings)
			}
		})
	}
}
