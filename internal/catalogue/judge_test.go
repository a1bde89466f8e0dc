package catalogue

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// A row as the runner knows it: its ID, role and judge, nothing else.
type judgedRow struct {
	id    string
	role  report.Role
	judge report.Judge
}

// mustFailStyle are the probe's rows of must-fail-style checks (a
// destination that must stay closed, dialled directly) and two that are
// not in the catalogue: a new check of the kind declares its role and
// judge on its row, and the runner judges it with no change of its own.
func mustFailStyle(t *testing.T) []judgedRow {
	var rows []judgedRow
	for _, c := range probes.Catalogue() {
		if c.Role == report.RoleMustFail || c.Role == report.RoleMetadata {
			rows = append(rows, judgedRow{c.ID, c.Role, c.Judge})
		}
	}
	if len(rows) < 3 {
		t.Fatalf("the catalogue holds %d must-fail-style rows, want egress.must-fail, egress.metadata, egress.udp at least", len(rows))
	}
	return append(rows,
		judgedRow{"egress.hypothetical-sctp", report.RoleMustFail, report.Judge{Unserved: true, FollowUp: true}},
		judgedRow{"egress.hypothetical-icmp", report.RoleMustFail, report.Judge{}},
	)
}

// overTheWire is what the runner reads of findings the probe made under
// the row: declared by the probe (DeclareRoles), printed, parsed and
// stamped by the runner (ParseResult).
func overTheWire(t *testing.T, vantage string, fs ...report.Finding) report.ProbeResult {
	t.Helper()
	res := report.ProbeResult{Schema: report.ProbeResultSchema, Nonce: "n", Vantage: vantage, Findings: fs}
	res.DeclareRoles()
	for i := range res.Findings {
		res.Findings[i].Role, res.Findings[i].Judge = "", report.Judge{}
	}
	out, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	got, err := runner.ParseResult("test/"+vantage, out, "n")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestJudgedByRow: the control judging and the DNS-only follow-up treat a
// must-fail-style check by what its row declares, whatever its ID — a
// deny the control answered is proven; a destination silent to the
// control too (which reached others) is not applicable where the row says
// Unserved, else unproven; a name only the sandbox's resolver stopped is
// dialled again, at the control's addresses, where the row says FollowUp,
// and its verdict replaces the first.
func TestJudgedByRow(t *testing.T) {
	for _, row := range mustFailStyle(t) {
		t.Run(row.id, func(t *testing.T) {
			t.Run("control", func(t *testing.T) { judgeAgainstControl(t, row) })
			t.Run("follow-up", func(t *testing.T) { followUpByRow(t, row) })
		})
	}
}

func judgeAgainstControl(t *testing.T, row judgedRow) {
	mk := func(sub, class string) report.Finding {
		return report.Finding{Check: row.id, Role: row.role, Judge: row.judge, Subject: sub, Status: report.Pass, Class: class}
	}
	res := overTheWire(t, "", mk("open.example:443/x", "timeout"), mk("unserved.example:443/x", "timeout"))
	ctl := overTheWire(t, "control", mk("open.example:443/x", report.ClassAnswered), mk("unserved.example:443/x", "timeout"))
	runner.ApplyControl(&res, runner.NewControl("test/control", ctl))
	if f := res.Findings[0]; f.Status != report.Pass || f.Deny != report.DenyProven {
		t.Errorf("%s: %s, deny %q; want a pass, proven by the control's answer", f.Name(), f.Status, f.Deny)
	}
	want, deny := report.Inconclusive, report.DenyUnproven
	if row.judge.Unserved {
		want, deny = report.Skip, ""
	}
	if f := res.Findings[1]; f.Status != want || f.Deny != deny {
		t.Errorf("%s (judge %+v): %s, deny %q; want %s, deny %q (%s)", f.Name(), row.judge, f.Status, f.Deny, want, deny, f.Actual)
	}
}

func followUpByRow(t *testing.T, row judgedRow) {
	doc := []byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: rows}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  egress:
    allow: [{host: api.example, port: 443, reason: the witness}]
    mustFail: {hosts: [blocked.example, other.example]}
`)
	p, err := policy.Load(doc)
	if err != nil {
		t.Fatal(err)
	}
	// Its subjects begin with the host and port it dials; what follows
	// is the check's own.
	sub := "blocked.example:443/" + row.id
	first := overTheWire(t, "", report.Finding{Check: row.id, Role: row.role, Judge: row.judge, Subject: sub, Status: report.Inconclusive, Class: policy.VerdictDNSRefused,
		Attempt: &report.Attempt{Attempted: true, StoppedBy: report.StoppedByResolver, Rcode: "REFUSED"}})
	ctl := overTheWire(t, "control", report.Finding{Check: row.id, Role: row.role, Judge: row.judge, Subject: sub, Status: report.Pass, Class: report.ClassAnswered,
		Attempt: &report.Attempt{Attempted: true, Resolved: []string{"192.0.2.7"}}})
	fu, ok, err := runner.DNSOnlyFollowUp(runner.ProbeSpec{Policy: p, PolicyBytes: doc, Nonce: "n"}, []report.ProbeResult{first}, runner.NewControl("test/control", ctl))
	if err != nil {
		t.Fatal(err)
	}
	if ok != row.judge.FollowUp {
		t.Fatalf("a follow-up: %v, want %v (judge %+v)", ok, row.judge.FollowUp, row.judge)
	}
	if !ok {
		return
	}
	if !slices.Contains(strings.Split(fu.Spec.Only, ","), row.id) {
		t.Errorf("the follow-up runs %q, not %s", fu.Spec.Only, row.id)
	}
	hosts := fu.Spec.Policy.Spec.Egress.MustFail.Hosts
	if len(hosts) != 1 || hosts[0].Target != "blocked.example" || !slices.Equal(hosts[0].Addresses, []string{"192.0.2.7"}) {
		t.Errorf("the follow-up's must-fail hosts: %+v, want blocked.example at the control's 192.0.2.7", hosts)
	}
	again := overTheWire(t, "", report.Finding{Check: row.id, Role: row.role, Judge: row.judge, Subject: sub, Status: report.Fail, Class: report.ClassAnswered, Evidence: "192.0.2.7: answered"})
	runner.MergeFollowUp(&first, again, nil, fu, "test/control")
	if f := first.Findings[0]; f.Status != report.Fail || !strings.Contains(f.Evidence, "(192.0.2.7) were dialled from the sandbox") {
		t.Errorf("after the follow-up: %s %q, want its failure", f.Status, f.Evidence)
	}
}

// TestJudgesFitRoles: a judge means something only with a deny role, and
// the follow-up only re-runs checks that plan from the policy's must-fail
// hosts (role must-fail).
func TestJudgesFitRoles(t *testing.T) {
	for _, c := range probes.Catalogue() {
		if c.Judge.Unserved && !c.Role.Deny() {
			t.Errorf("%s: Unserved with role %q, which is no deny", c.ID, c.Role)
		}
		if c.Judge.FollowUp && c.Role != report.RoleMustFail {
			t.Errorf("%s: FollowUp with role %q, want %q", c.ID, c.Role, report.RoleMustFail)
		}
	}
}
