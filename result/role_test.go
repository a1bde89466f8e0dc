package result

import (
	"encoding/json"
	"testing"
)

// TestRolesOverTheWire: the role and the judge of each check go from the
// probe's findings into its printed result once per check and back onto
// every finding of the check, and the declarations are gone after.
func TestRolesOverTheWire(t *testing.T) {
	judge := Judge{Unserved: true, FollowUp: true}
	res := ProbeResult{Findings: []Finding{
		{Check: "egress.new", Subject: "a:443/x", Role: RoleMustFail, Judge: judge},
		{Check: "egress.new", Subject: "b:443/x", Role: RoleMustFail, Judge: judge},
		{Check: "egress.allowed", Subject: "c:443", Role: RoleAllowance},
		{Check: "fs.root-readonly"},
	}}
	res.DeclareRoles()
	out, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var got ProbeResult
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Judges) != 1 || len(got.Roles) != 2 {
		t.Errorf("declared: roles %v judges %v, want two roles and one judge", got.Roles, got.Judges)
	}
	got.StampRoles()
	for i, f := range got.Findings {
		if w := res.Findings[i]; f.Role != w.Role || f.Judge != w.Judge {
			t.Errorf("%s: role %q judge %+v, want %q %+v", f.Name(), f.Role, f.Judge, w.Role, w.Judge)
		}
	}
	if got.Roles != nil || got.Judges != nil {
		t.Errorf("the declarations stay after stamping: %v %v", got.Roles, got.Judges)
	}
}
