package audit

import (
	"fmt"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/sandprobe/sandprobe/report"
)

// holdsTenants are domains that are not public suffixes themselves but
// hold some under them (the Public Suffix List cannot say what lies below
// a name): a wildcard over one of these covers every tenant of the
// suffixes inside, *.amazonaws.com every S3 bucket.
var holdsTenants = map[string]string{
	"amazonaws.com":          "s3.amazonaws.com and every regional S3, Lambda URL and API Gateway host",
	"windows.net":            "blob.core.windows.net and the other Azure storage endpoints",
	"core.windows.net":       "blob.core.windows.net and the other Azure storage endpoints",
	"googleusercontent.com":  "every user's content on Google's hosting",
	"digitaloceanspaces.com": "every DigitalOcean Spaces bucket",
	"run.app":                "every Cloud Run service",
	"cloudflarestorage.com":  "every R2 bucket",
}

// RiskyWildcard says why a host pattern opens content anyone can publish:
// "*" (every host), a wildcard over a public suffix (ICANN's: *.com, or a
// private one: *.github.io, *.s3.amazonaws.com, *.herokuapp.com,
// *.vercel.app, *.azurewebsites.net … — the Public Suffix List, as
// golang.org/x/net/publicsuffix carries it), or over a domain that holds
// such suffixes (*.amazonaws.com). "" when it is none of these.
func RiskyWildcard(host string) string {
	if host == "*" {
		return "it allows every host"
	}
	domain, ok := strings.CutPrefix(host, "*.")
	if !ok {
		return ""
	}
	if what, ok := holdsTenants[domain]; ok {
		return fmt.Sprintf("%s holds multi-tenant suffixes (%s): anyone can serve content under it", domain, what)
	}
	ps, icann := publicsuffix.PublicSuffix(domain)
	if ps != domain {
		return ""
	}
	if icann {
		return fmt.Sprintf("%s is a public suffix: anyone can register a domain under it", domain)
	}
	return fmt.Sprintf("%s is a multi-tenant suffix (the Public Suffix List's private section): every user or customer of it serves content under it", domain)
}

// judgeWildcard is an allowance's egress.allowance-wildcard finding; only
// wildcards get one.
func judgeWildcard(a *report.AllowanceUsage) (report.Finding, bool) {
	if !strings.HasPrefix(a.Host, "*") {
		return report.Finding{}, false
	}
	subject := HostPort(a.Host, a.Port)
	f := report.Finding{Check: CheckWildcard, Target: "policy", Subject: subject,
		Expected: "a wildcard over the organisation's own names only"}
	why := RiskyWildcard(a.Host)
	if why == "" {
		f.Status, f.Actual = report.Pass, "not a public or multi-tenant suffix"
		return f, true
	}
	a.Risk = why
	f.Status, f.Actual = report.Fail, why
	f.Fix = fmt.Sprintf("narrow spec.egress.allow[%d] (%s) to the exact hosts the sandbox needs; the reason says %q", a.Index, subject, a.Reason)
	f.Evidence = fmt.Sprintf("%d requests used it in the record", a.Requests)
	return f, true
}
