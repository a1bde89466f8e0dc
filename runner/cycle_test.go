package runner

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// phased is a backend with every optional phase; it records the order the
// cycle called them in.
type phased struct {
	preflight error
	run       func(ctx context.Context) ([]report.ProbeResult, error)
	calls     []string
}

func (b *phased) Preflight(context.Context, ProbeSpec) error {
	b.calls = append(b.calls, "preflight")
	return b.preflight
}

func (b *phased) Run(ctx context.Context, _ ProbeSpec) ([]report.ProbeResult, error) {
	b.calls = append(b.calls, "run")
	return b.run(ctx)
}

func (b *phased) AfterProbe(_ context.Context, _ ProbeSpec, run *report.Run) {
	b.calls = append(b.calls, "after")
	run.Phases["after"] = 0
}

func (b *phased) Target(ProbeSpec) string { return "namespace/agents" }

// TestCycle: every backend's cycle is preflight, probe, after-probe phase;
// a failed preflight is the run's one error finding (no probe, no drift),
// an interrupted probe is deadline-exceeded, and nothing runs after a
// cancelled probe. Pure logic: the backends are the real ones' shape only.
func TestCycle(t *testing.T) {
	pass := func(context.Context) ([]report.ProbeResult, error) {
		return []report.ProbeResult{{Target: "here", Findings: []report.Finding{{Check: "identity.uid", Status: report.Pass}}}}, nil
	}
	cases := []struct {
		name      string
		b         *phased
		cancel    bool
		wantCalls []string
		wantErr   bool
		want      []string // check/subject of each finding
	}{
		{"healthy", &phased{run: pass}, false, []string{"preflight", "run", "after"}, false, []string{"identity.uid/"}},
		{"unreachable", &phased{preflight: errors.New("cannot reach the cluster at https://x"), run: pass}, false, []string{"preflight"}, true, []string{"probe.run/" + ReasonLaunch}},
		{"backend error", &phased{run: func(context.Context) ([]report.ProbeResult, error) {
			return nil, &CouldNotRun{Target: "node/a", Where: report.Location{Node: "a"}, Reason: ReasonCrashed, Detail: "exit 139"}
		}}, false, []string{"preflight", "run", "after"}, false, []string{"probe.run/" + ReasonCrashed}},
		{"interrupted", &phased{run: func(ctx context.Context) ([]report.ProbeResult, error) { return nil, ctx.Err() }}, true, []string{"preflight", "run"}, false, []string{"probe.run/" + ReasonDeadline}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			if c.cancel {
				cancel()
			}
			defer cancel()
			p := &policy.Policy{}
			p.Metadata.Name = "agents"
			run, err := Cycle{Backend: c.b, Name: "kube", Version: "test"}.Run(ctx, ProbeSpec{Policy: p})
			if !slices.Equal(c.b.calls, c.wantCalls) {
				t.Errorf("calls %v, want %v", c.b.calls, c.wantCalls)
			}
			if (err != nil) != c.wantErr {
				t.Errorf("err %v, want error %v", err, c.wantErr)
			}
			var got []string
			for _, f := range run.Findings {
				got = append(got, f.Check+"/"+f.Subject)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("findings %v, want %v", got, c.want)
			}
			if c.wantErr && run.Findings[0].Target != "namespace/agents" {
				t.Errorf("preflight error on %q, want the backend's target", run.Findings[0].Target)
			}
			if run.Policy != "agents" || run.Backend != "kube" || run.Version != "test" {
				t.Errorf("run header %q %q %q", run.Policy, run.Backend, run.Version)
			}
		})
	}
}
