package runner

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/report"
)

// TestApplyControl: the rule as a table. A blocked destination is a proven
// deny only when the control got an answer (or the proxy refused it
// itself); else the deny is unproven and a pass becomes inconclusive, with
// the reason in its evidence. Answers, and verdicts that could not be
// checked, are no denies.
func TestApplyControl(t *testing.T) {
	// A tunnel closed at the ClientHello: the proxy, or a front that drops the name.
	closedAtHello := &report.Attempt{Attempted: true, StoppedBy: report.StoppedByProxy, Signal: report.SignalClosedAtHello}
	probe := func() report.ProbeResult {
		return report.ProbeResult{Findings: []report.Finding{
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "live:443", Status: report.Pass, Class: "timeout"},
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "dead:443", Status: report.Pass, Class: "refused"},
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "unseen:443", Status: report.Pass, Class: "timeout"},
			// A sidecar's blackhole took it: neither an answer nor a deny.
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "sidecar:443", Status: report.Inconclusive, Class: "intercepted"},
			// Only the sandbox's resolver stopped it: nothing was dialled.
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "dnsonly:443", Status: report.Inconclusive, Class: "dns-refused", Attempt: &report.Attempt{Attempted: true, StoppedBy: report.StoppedByResolver, Rcode: "REFUSED"}},
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "open:443", Status: report.Fail, Class: "answered"},
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "changed:443", Status: report.Fail, Class: "refused"},
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "live:443 via proxy", Status: report.Pass, Class: "proxy-denied"},
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "dead:443 via proxy", Status: report.Inconclusive, Class: "error"},
			{Check: "egress.metadata", Role: report.RoleMetadata, Judge: metadataJudge, Subject: "169.254.169.254:80", Status: report.Pass, Class: "timeout"},
			{Check: "egress.metadata", Role: report.RoleMetadata, Judge: metadataJudge, Subject: "169.254.169.254:443", Status: report.Pass, Class: "timeout"},
			{Check: "egress.metadata", Role: report.RoleMetadata, Judge: metadataJudge, Subject: "169.254.170.2:80", Status: report.Inconclusive, Class: "timeout"},
			{Check: "egress.metadata", Role: report.RoleMetadata, Judge: metadataJudge, Subject: "100.100.100.200:80", Status: report.Fail, Class: "answered"},
			{Check: "egress.proxy-bypass", Role: report.RoleProxyBypass, Subject: "api:443 direct", Status: report.Error, Class: "error"},
			{Check: "egress.allowed", Role: report.RoleAllowance, Subject: "api:443 via proxy", Status: report.Pass, Class: "answered"},
			{Check: "egress.dns-exfil", Role: report.RoleDNSChannel, Subject: "*.lab.test", Status: report.Pass, Class: "dns-refused"},
			{Check: "egress.dns-bypass", Role: report.RoleDNSBypass, Subject: "8.8.8.8:53/udp", Status: report.Pass, Class: "timeout"},
			{Check: "egress.dns-bypass", Role: report.RoleDNSBypass, Subject: "10.9.9.9:53/udp", Status: report.Pass, Class: "timeout"},
			{Check: "egress.dns-bypass", Role: report.RoleDNSBypass, Subject: "1.1.1.1:53/tcp", Status: report.Fail, Class: "answered"},
			{Check: "egress.sni-mismatch", Role: report.RoleFronting, Subject: "evil via front:443", Status: report.Pass, Class: "proxy-denied", Attempt: closedAtHello},
			{Check: "egress.sni-mismatch", Role: report.RoleFronting, Subject: "evil via router:443", Status: report.Pass, Class: "proxy-denied", Attempt: closedAtHello},
			{Check: "egress.sni-mismatch", Role: report.RoleFronting, Subject: "evil via bumped:443", Status: report.Pass, Class: "proxy-denied", Attempt: &report.Attempt{Attempted: true}},
			{Check: "egress.sni-mismatch", Role: report.RoleFronting, Subject: "evil via open:443", Status: report.Fail, Class: "answered"},
			// The neighbours the probe derives on its node: the kubelet
			// denied (the rendered policy), its read-only port off on
			// every node, and an ipBlock for the node that lets it in.
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "node:10250 (kubelet)", Status: report.Pass, Class: "timeout"},
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "node:10255 (kubelet read-only)", Status: report.Pass, Class: "refused"},
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "node:2375 (container runtime API)", Status: report.Fail, Class: "answered"},
			// No kube-proxy: the service address answers nobody.
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "kubernetes API 10.96.0.1:443", Status: report.Pass, Class: "timeout"},
		}}
	}
	control := NewControl("namespace/sandprobe-system", report.ProbeResult{Findings: []report.Finding{
		{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "live:443", Status: report.Pass, Class: "answered", Evidence: "connected"},
		{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "dead:443", Status: report.Pass, Class: "refused", Evidence: "ECONNREFUSED"},
		{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "changed:443", Status: report.Pass, Class: "answered"},
		{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "dnsonly:443", Status: report.Pass, Class: "answered", Evidence: "connected"},
		{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "sidecar:443", Status: report.Pass, Class: "answered", Evidence: "HTTP/1.1 200 OK"},
		{Check: "egress.metadata", Role: report.RoleMetadata, Judge: metadataJudge, Subject: "169.254.169.254:80", Status: report.Error, Class: "error", Actual: "not attempted"},
		// GCE and EC2: nothing listens on :443 (a reset); 169.254.170.2
		// is ECS only and 100.100.100.200 Alibaba only (no answer).
		{Check: "egress.metadata", Role: report.RoleMetadata, Judge: metadataJudge, Subject: "169.254.169.254:443", Status: report.Pass, Class: "refused", Evidence: "ECONNREFUSED"},
		{Check: "egress.metadata", Role: report.RoleMetadata, Judge: metadataJudge, Subject: "169.254.170.2:80", Status: report.Pass, Class: "timeout"},
		{Check: "egress.metadata", Role: report.RoleMetadata, Judge: metadataJudge, Subject: "100.100.100.200:80", Status: report.Pass, Class: "timeout"},
		{Check: "egress.dns-bypass", Role: report.RoleDNSBypass, Subject: "8.8.8.8:53/udp", Status: report.Pass, Class: "answered", Evidence: "8.8.8.8:53 answered NXDOMAIN over udp"},
		// An outside resolver the policy names where no DNS server runs:
		// it ignores everyone, so the sandbox's timeout proves no rule.
		{Check: "egress.dns-bypass", Role: report.RoleDNSBypass, Subject: "10.9.9.9:53/udp", Status: report.Pass, Class: "timeout"},
		{Check: "egress.sni-mismatch", Role: report.RoleFronting, Subject: "evil via front:443", Status: report.Pass, Class: "answered", Evidence: "the front completed a TLS handshake for evil"},
		// An SNI router with no default backend: silent to the control too.
		{Check: "egress.sni-mismatch", Role: report.RoleFronting, Subject: "evil via router:443", Status: report.Pass, Class: "refused"},
		{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "node:10250 (kubelet)", Status: report.Pass, Class: "answered", Evidence: "10.0.0.7:10250: TLS 1.3"},
		{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "node:10255 (kubelet read-only)", Status: report.Pass, Class: "refused"},
		{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "kubernetes API 10.96.0.1:443", Status: report.Pass, Class: "timeout"},
	}})
	type want struct {
		status        report.Status
		deny, control string
	}
	cases := []struct {
		name    string
		control *Control
		want    map[string]want
	}{
		{"with a control", control, map[string]want{
			"egress.must-fail live:443":               {report.Pass, report.DenyProven, "answered"},
			"egress.must-fail dead:443":               {report.Inconclusive, report.DenyUnproven, "refused"},
			"egress.must-fail unseen:443":             {report.Inconclusive, report.DenyUnproven, ""},
			"egress.must-fail dnsonly:443":            {report.Inconclusive, report.DenyUnproven, ""},
			"egress.must-fail sidecar:443":            {report.Inconclusive, report.DenyUnproven, ""},
			"egress.must-fail open:443":               {report.Fail, "", ""},
			"egress.must-fail changed:443":            {report.Fail, report.DenyProven, "answered"},
			"egress.must-fail live:443 via proxy":     {report.Pass, report.DenyProven, ""},
			"egress.must-fail dead:443 via proxy":     {report.Inconclusive, report.DenyUnproven, ""},
			"egress.metadata 169.254.169.254:80":      {report.Inconclusive, report.DenyUnproven, "error"},
			"egress.metadata 169.254.169.254:443":     {report.Skip, "", "refused"},
			"egress.metadata 169.254.170.2:80":        {report.Skip, "", "timeout"},
			"egress.metadata 100.100.100.200:80":      {report.Fail, "", ""},
			"egress.proxy-bypass api:443 direct":      {report.Error, "", ""},
			"egress.allowed api:443 via proxy":        {report.Pass, "", ""},
			"egress.dns-exfil *.lab.test":             {report.Pass, "", ""},
			"egress.dns-bypass 8.8.8.8:53/udp":        {report.Pass, report.DenyProven, "answered"},
			"egress.dns-bypass 10.9.9.9:53/udp":       {report.Inconclusive, report.DenyUnproven, "timeout"},
			"egress.dns-bypass 1.1.1.1:53/tcp":        {report.Fail, "", ""},
			"egress.sni-mismatch evil via front:443":  {report.Pass, report.DenyProven, "answered"},
			"egress.sni-mismatch evil via router:443": {report.Inconclusive, report.DenyUnproven, "refused"},
			"egress.sni-mismatch evil via bumped:443": {report.Pass, report.DenyProven, ""},
			"egress.sni-mismatch evil via open:443":   {report.Fail, "", ""},
			// A neighbour nothing listens on, for the control too, is no
			// false alarm and no pass: not applicable.
			"egress.must-fail node:10250 (kubelet)":              {report.Pass, report.DenyProven, "answered"},
			"egress.must-fail node:10255 (kubelet read-only)":    {report.Skip, "", "refused"},
			"egress.must-fail node:2375 (container runtime API)": {report.Fail, "", ""},
			"egress.must-fail kubernetes API 10.96.0.1:443":      {report.Skip, "", "timeout"},
		}},
		{"no control at all", nil, map[string]want{
			"egress.must-fail live:443":               {report.Inconclusive, report.DenyUnproven, ""},
			"egress.sni-mismatch evil via front:443":  {report.Inconclusive, report.DenyUnproven, ""},
			"egress.sni-mismatch evil via bumped:443": {report.Pass, report.DenyProven, ""},
			"egress.must-fail live:443 via proxy":     {report.Pass, report.DenyProven, ""},
		}},
		{"a sandbox isolated by construction", &Control{Vantage: "local/sandbox", Isolated: "loopback only"}, map[string]want{
			"egress.must-fail live:443":              {report.Pass, report.DenyProven, ""},
			"egress.sni-mismatch evil via front:443": {report.Inconclusive, report.DenyUnproven, ""},
			"egress.must-fail open:443":              {report.Fail, "", ""},
			"egress.must-fail live:443 via proxy":    {report.Pass, report.DenyProven, ""},
		}},
		// A control that reached nothing may be dead itself: its silence
		// makes no metadata place "not applicable", and proves no deny.
		{"a control that reached nothing", NewControl("namespace/dead", report.ProbeResult{Findings: []report.Finding{
			// A name it resolved (its hosts file) shows nothing of its network.
			{Check: "egress.dns-exfil", Role: report.RoleDNSChannel, Subject: "name blocked.example", Status: report.Pass, Class: "answered"},
			{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "live:443", Status: report.Pass, Class: "timeout"},
			{Check: "egress.metadata", Role: report.RoleMetadata, Judge: metadataJudge, Subject: "169.254.169.254:443", Status: report.Pass, Class: "timeout"},
			{Check: "egress.metadata", Role: report.RoleMetadata, Judge: metadataJudge, Subject: "169.254.170.2:80", Status: report.Pass, Class: "timeout"},
		}}), map[string]want{
			"egress.must-fail live:443":           {report.Inconclusive, report.DenyUnproven, "timeout"},
			"egress.metadata 169.254.169.254:443": {report.Inconclusive, report.DenyUnproven, "timeout"},
			"egress.metadata 169.254.170.2:80":    {report.Inconclusive, report.DenyUnproven, "timeout"},
		}},
		// Alive only by the one place being judged: that is no other proof.
		{"a control that reached only the place judged", NewControl("namespace/one", report.ProbeResult{Findings: []report.Finding{
			{Check: "egress.metadata", Role: report.RoleMetadata, Judge: metadataJudge, Subject: "169.254.169.254:443", Status: report.Pass, Class: "timeout"},
			{Check: "egress.metadata", Role: report.RoleMetadata, Judge: metadataJudge, Subject: "169.254.169.254:80", Status: report.Pass, Class: "answered"},
		}}), map[string]want{
			"egress.metadata 169.254.169.254:443": {report.Skip, "", "timeout"},
		}},
		{"a control that could not run", &Control{Vantage: "namespace/x", Err: errors.New("image-pull-failed")}, map[string]want{
			"egress.must-fail live:443": {report.Inconclusive, report.DenyUnproven, ""},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := probe()
			ApplyControl(&res, c.control)
			for _, f := range res.Findings {
				w, ok := c.want[f.Name()]
				if !ok {
					continue
				}
				if got := (want{f.Status, f.Deny, f.Control}); got != w {
					t.Errorf("%s: %+v, want %+v (%s)", f.Name(), got, w, f.Evidence)
				}
				if f.Deny == report.DenyUnproven && f.Status == report.Inconclusive && f.Fix == "" {
					t.Errorf("%s: an unproven deny without a fix", f.Name())
				}
			}
		})
	}
}

// TestApplyControlDNSNames: a must-fail name's NXDOMAIN in the sandbox
// shows the resolver does not forward only for a name the control
// resolves; real policies are full of names that do not exist upstream,
// whose NXDOMAIN a forwarder relays as it is. A random name's NXDOMAIN
// that rested on such names alone is unproven too; the canary zone, or a
// resolver's REFUSED, settles it whatever the control saw.
func TestApplyControlDNSNames(t *testing.T) {
	nx := func(subject string) report.Finding {
		return report.Finding{Check: "egress.dns-exfil", Role: report.RoleDNSChannel, Subject: subject, Status: report.Pass, Class: "dns-nxdomain"}
	}
	control := NewControl("namespace/ctl", report.ProbeResult{Findings: []report.Finding{
		{Check: "egress.dns-exfil", Role: report.RoleDNSChannel, Subject: "name exists.example", Status: report.Pass, Class: "answered", Evidence: "exists.example resolved to 192.0.2.1"},
		{Check: "egress.dns-exfil", Role: report.RoleDNSChannel, Subject: "name gone.example", Status: report.Pass, Class: "dns-nxdomain", Evidence: "NXDOMAIN from 10.0.0.10:53 for gone.example"},
		{Check: "egress.must-fail", Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "live:443", Status: report.Pass, Class: "answered"},
	}})
	type want struct {
		status report.Status
		deny   string
	}
	cases := []struct {
		name     string
		findings []report.Finding
		control  *Control
		want     map[string]want
	}{
		{"a name that exists", []report.Finding{nx("*.example"), nx("name exists.example"), nx("name gone.example")}, control, map[string]want{
			"egress.dns-exfil name exists.example": {report.Pass, report.DenyProven},
			"egress.dns-exfil name gone.example":   {report.Inconclusive, report.DenyUnproven},
			"egress.dns-exfil *.example":           {report.Pass, ""},
		}},
		{"only names that do not exist", []report.Finding{nx("*.example"), nx("name gone.example"), nx("name unseen.example")}, control, map[string]want{
			"egress.dns-exfil name gone.example":   {report.Inconclusive, report.DenyUnproven},
			"egress.dns-exfil name unseen.example": {report.Inconclusive, report.DenyUnproven},
			"egress.dns-exfil *.example":           {report.Inconclusive, report.DenyUnproven},
		}},
		{"the canary settles it", []report.Finding{nx("*.example"), nx("canary *.canary.example"), nx("name gone.example")}, control, map[string]want{
			"egress.dns-exfil *.example":               {report.Pass, ""},
			"egress.dns-exfil canary *.canary.example": {report.Pass, ""},
			"egress.dns-exfil name gone.example":       {report.Inconclusive, report.DenyUnproven},
		}},
		{"a resolver that refuses", []report.Finding{nx("*.example"), {Check: "egress.dns-exfil", Role: report.RoleDNSChannel, Subject: "name gone.example", Status: report.Pass, Class: "dns-refused"}}, control, map[string]want{
			"egress.dns-exfil *.example":         {report.Pass, ""},
			"egress.dns-exfil name gone.example": {report.Pass, ""},
		}},
		{"no control", []report.Finding{nx("*.example"), nx("name exists.example")}, nil, map[string]want{
			"egress.dns-exfil name exists.example": {report.Inconclusive, report.DenyUnproven},
			"egress.dns-exfil *.example":           {report.Inconclusive, report.DenyUnproven},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := report.ProbeResult{Findings: c.findings}
			ApplyControl(&res, c.control)
			for _, f := range res.Findings {
				w, ok := c.want[f.Name()]
				if !ok {
					t.Errorf("unexpected %s", f.Name())
					continue
				}
				if got := (want{f.Status, f.Deny}); got != w {
					t.Errorf("%s: %+v, want %+v (%s; %s)", f.Name(), got, w, f.Actual, f.Evidence)
				}
				if f.Status == report.Inconclusive && (f.Fix == "" || !strings.Contains(f.Actual, "unproven")) {
					t.Errorf("%s: inconclusive without why and fix: %+v", f.Name(), f)
				}
			}
		})
	}
}

// TestApplyControlUDP: a QUIC probe's silence is a proven deny where the
// control got Version Negotiation from the same address; where nothing
// answers the control either (most hosts speak no QUIC) and the control
// reached something else, it is not applicable — no false alarm; with a
// control that reached nothing, it stays unproven, never a pass.
func TestApplyControlUDP(t *testing.T) {
	probe := func() report.ProbeResult {
		return report.ProbeResult{Findings: []report.Finding{
			{Check: "egress.udp", Role: report.RoleMustFail, Judge: udpJudge, Subject: "quic.example:443/udp", Status: report.Pass, Class: "timeout"},
			{Check: "egress.udp", Role: report.RoleMustFail, Judge: udpJudge, Subject: "noquic.example:443/udp", Status: report.Pass, Class: "timeout"},
			{Check: "egress.udp", Role: report.RoleMustFail, Judge: udpJudge, Subject: "open.example:443/udp", Status: report.Fail, Class: "answered"},
		}}
	}
	alive := NewControl("local/ctl", report.ProbeResult{Findings: []report.Finding{
		{Check: "egress.udp", Role: report.RoleMustFail, Judge: udpJudge, Subject: "quic.example:443/udp", Status: report.Pass, Class: "answered", Evidence: "QUIC version negotiation (0x1)"},
		{Check: "egress.udp", Role: report.RoleMustFail, Judge: udpJudge, Subject: "noquic.example:443/udp", Status: report.Pass, Class: "timeout"},
		{Check: "egress.udp", Role: report.RoleMustFail, Judge: udpJudge, Subject: "open.example:443/udp", Status: report.Pass, Class: "answered"},
	}})
	res := probe()
	ApplyControl(&res, alive)
	want := map[string][2]string{
		"quic.example:443/udp":   {"pass", report.DenyProven},
		"noquic.example:443/udp": {"skip", ""},
		"open.example:443/udp":   {"fail", ""},
	}
	for _, f := range res.Findings {
		if got := [2]string{string(f.Status), f.Deny}; got != want[f.Subject] {
			t.Errorf("%s: %v, want %v (%s)", f.Subject, got, want[f.Subject], f.Actual)
		}
	}
	dead := NewControl("local/ctl", report.ProbeResult{Findings: []report.Finding{
		{Check: "egress.udp", Role: report.RoleMustFail, Judge: udpJudge, Subject: "noquic.example:443/udp", Status: report.Pass, Class: "timeout"},
	}})
	res = probe()
	ApplyControl(&res, dead)
	if f := res.Findings[1]; f.Status != report.Inconclusive || f.Deny != report.DenyUnproven {
		t.Errorf("a control that reached nothing: %s/%s, want inconclusive/unproven", f.Status, f.Deny)
	}
}
