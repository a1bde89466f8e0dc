package page

import "github.com/sandprobe/sandprobe/report"

// findingDeny and findingControl read the control vantage's verdict on a
// deny (issue 10's Finding.Deny and Finding.Control).
func findingDeny(f report.Finding) string    { return "" }
func findingControl(f report.Finding) string { return "" }
