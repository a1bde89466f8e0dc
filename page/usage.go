package page

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/sandprobe/sandprobe/report"
)

// usageView is what the page shows of the proxy's record: the window and
// sources, each allowance's use beside its verdict (allowanceUse on the
// allowed rows), what the proxy denied and what the declared policy would
// block.
type usageView struct {
	Window, Sources, Marking string
	Denied, WouldBlock       []useRow
	DeniedMore, BlockMore    int
	Unused, Risky            int
}

// allowanceUse is one allowance's use, beside its probe verdict.
type allowanceUse struct {
	Text, Verdict, Class, Note, Risk string
}

type useRow struct {
	Sandbox, Destination, Count, First, Last string
}

// maxUseRows bounds the denied and would-block tables (the JSON report
// holds more).
const maxUseRows = 20

func usageOf(u *report.EgressUsage, allowed []row) *usageView {
	if u == nil {
		return nil
	}
	v := &usageView{Window: fmt.Sprintf("%s to %s", stamp(u.From), stamp(u.To))}
	var src []string
	for _, s := range u.Sources {
		t := fmt.Sprintf("%s (%s, %d records)", s.Name, s.Format, s.Records)
		if s.Error != "" {
			t += ": " + s.Error
		}
		src = append(src, t)
	}
	v.Sources = strings.Join(src, "; ")
	switch {
	case u.ProbeRecords > 0:
		v.Marking = fmt.Sprintf("the probe's own %d marked attempts are left out", u.ProbeRecords)
	case u.Unmarked:
		v.Marking = "this record keeps no User-Agent or proxy user: the probe's own attempts are counted"
	}
	for i := range allowed {
		r := &allowed[i]
		if r.allowance == 0 || r.allowance > len(u.Allowances) {
			continue
		}
		a := u.Allowances[r.allowance-1]
		use := &allowanceUse{Verdict: strings.ToUpper(string(a.Verdict)), Class: statusOf(a.Verdict).Class, Risk: a.Risk}
		if a.Verdict == "" {
			use.Verdict, use.Class = "NO RECORD", "skip"
		}
		if a.Verdict == report.Fail {
			v.Unused++
			use.Verdict = "UNUSED"
		}
		if a.Risk != "" {
			v.Risky++
		}
		use.Text = fmt.Sprintf("%d requests", a.Requests)
		if !a.LastUse.IsZero() {
			use.Text += ", last " + stamp(a.LastUse)
		}
		if a.SandboxCount > 0 {
			use.Text += fmt.Sprintf(", %d sandboxes", a.SandboxCount)
		}
		if a.Verdict != report.Pass {
			use.Note = a.Note
			if a.Verdict == report.Fail {
				use.Note += fmt.Sprintf(" — remove? the reason says %q", a.Reason)
			}
		}
		r.Use = use
	}
	rows := func(list []report.DestinationUse, total int) ([]useRow, int) {
		var out []useRow
		for _, d := range list[:min(len(list), maxUseRows)] {
			out = append(out, useRow{Sandbox: d.Sandbox, Destination: net.JoinHostPort(d.Host, strconv.Itoa(d.Port)), Count: strconv.FormatInt(d.Count, 10), First: stampOr(d.First), Last: stampOr(d.Last)})
		}
		return out, total - len(out)
	}
	v.Denied, v.DeniedMore = rows(u.Denied, u.DeniedTotal)
	v.WouldBlock, v.BlockMore = rows(u.WouldBlock, u.WouldBlockTotal)
	return v
}

func stampOr(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return stamp(t)
}
