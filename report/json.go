package report

import (
	"encoding/json"
	"io"
)

// JSON writes the run as one indented JSON document.
type JSON struct{}

func (JSON) Write(w io.Writer, run Run) error {
	if run.Findings == nil {
		run.Findings = []Finding{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(run)
}
