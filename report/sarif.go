package report

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/owenrumney/go-sarif/v3/pkg/report/v210/sarif"
)

// SARIFRule describes one rule to code-scanning tools.
type SARIFRule struct {
	ID      string // "drift.pod.privileged"
	Proves  string // what a clean result proves: the rule's short description
	Fix     string // the usual fix: the rule's help
	HelpURI string
	// Severity sets the rule's security-severity (critical ≥ 9.0, high
	// 7.0–8.9, medium 4.0–6.9, low < 4): code scanning shows it.
	Severity Severity
}

// SARIF writes a run as SARIF 2.1.0, the format code-scanning tools
// (GitHub code scanning, GitLab, Sonar, IDE viewers) read, so a pull request
// that adds a privileged sandbox pod gets an annotation on the line. Failing
// findings are results of level error, inconclusive ones warnings; a finding
// that could not be checked is a tool execution notification and marks the
// invocation unsuccessful (it is not a result about the code). Passing and
// skipped findings are left out: SARIF lists problems.
//
// A finding with File and Line (drift -f) points at that line. Findings on
// the same field of the same object (a NetworkPolicy that opens the world to
// ten pods) are one result naming every sandbox it affects.
//
// It streams, as the other writers do: it reads the findings three times
// (a Spool is read again from its file) and holds 8 bytes per result (a
// hash of its key) and the targets of the results several findings share,
// not the report; each result is written exactly as go-sarif writes it.
type SARIF struct {
	Rules []SARIFRule
	// BaseDir is the directory file paths are written relative to (the
	// repository root, normally the working directory), as code-scanning
	// uploads expect. A file outside it is written as a file:// URI.
	BaseDir string
}

// sarifGroup is one result: a finding and every target it was reported for.
type sarifGroup struct {
	f       Finding
	targets []string
	seen    map[string]bool // targets, so a group of 100,000 pods stays linear
	key     string          // the group's key (sarifKey), to tell hash collisions
	first   int             // the number of its first finding
}

// Write writes run as SARIF, in the three passes the type's comment
// says: the prelude and the results' key hashes, the groups of the keys
// several findings share, then the report with its results.
func (s SARIF) Write(w io.Writer, run Run) error {
	set := run.Set()
	pre, hashes, err := s.prelude(set)
	if err != nil {
		return err
	}
	shared, collision, err := sharedGroups(set, hashes)
	if err != nil {
		return err
	}
	if collision {
		return s.writeWhole(w, run)
	}
	return s.writeResults(w, run, set, pre, hashes, shared)
}

// prelude is pass 1: what the report says before its results (rules met
// only in findings, the invocation's notifications), and a hash of each
// result's key, to find the keys more than one finding shares. hashes is
// by finding number: 0 for a finding that is no result. The findings are
// read on every core; what the prelude learns is taken in order.
func (s SARIF) prelude(set FindingSet) (*sarifPrelude, []uint64, error) {
	pre := s.newPrelude()
	hashes := make([]uint64, 0, set.Len())
	seed := maphash.MakeSeed()
	err := eachBatch(set, func(first int, fs []Finding) (func() error, error) {
		hs := make([]uint64, len(fs))
		var checks []Finding // the check and severity of each new rule
		var notes []string
		seen := map[string]bool{}
		for i := range fs {
			f := &fs[i]
			switch f.Status {
			case Fail, Inconclusive:
				hs[i] = max(sarifKeyHash(seed, f), 1) // a shared 1 is a collision the keys tell
				if !seen[f.Check] {
					seen[f.Check] = true
					checks = append(checks, Finding{Check: f.Check, Severity: f.Severity})
				}
			case Pass, Skip:
			default:
				notes = append(notes, notification(f))
			}
		}
		return func() error {
			hashes = append(hashes, hs...)
			for i := range checks {
				pre.meet(&checks[i])
			}
			pre.notifications = append(pre.notifications, notes...)
			return nil
		}, nil
	})
	return pre, hashes, err
}

// sharedGroups is pass 2, for the keys seen more than once only: every
// target of the group, in order, each once. A group is exactly a key:
// should two keys share a hash (collision), the report is built whole in
// memory instead.
func sharedGroups(set FindingSet, hashes []uint64) (map[uint64]*sarifGroup, bool, error) {
	shared := map[uint64]*sarifGroup{}
	sorted := slices.Clone(hashes)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] != 0 && sorted[i] == sorted[i-1] && shared[sorted[i]] == nil {
			shared[sorted[i]] = &sarifGroup{seen: map[string]bool{}}
		}
	}
	if len(shared) == 0 {
		return shared, false, nil
	}
	collision := false
	i := 0
	err := set.Each(func(f *Finding) error {
		g := shared[hashes[i]]
		i++
		if g == nil {
			return nil
		}
		key := sarifKey(f)
		if g.key == "" {
			// The result is written where its group first appears.
			g.key, g.f, g.first = key, *f, i-1
		} else if g.key != key {
			collision = true
		}
		for _, t := range findingTargets(f) {
			if !g.seen[t] {
				g.seen[t] = true
				g.targets = append(g.targets, t)
			}
		}
		return nil
	})
	return shared, collision, err
}

// writeResults is pass 3: the report around its results, as go-sarif
// writes it (a placeholder result marks where they go), and the results,
// each where its group first appears.
func (s SARIF) writeResults(w io.Writer, run Run, set FindingSet, pre *sarifPrelude, hashes []uint64, shared map[uint64]*sarifGroup) error {
	r := s.newRun(run, pre)
	head, tail, indent, err := sarifFrame(r)
	if err != nil {
		return err
	}
	b := bufio.NewWriterSize(w, 256<<10)
	b.Write(head)
	ruleIndex := map[string]int{}
	for _, id := range append(slices.Collect(maps.Keys(pre.known)), "") {
		ruleIndex[id] = r.GetRuleIndex(id)
	}
	// Each result is formatted on every core, in batches of findings
	// decoded there too (writeBatches): a finding is a result where it is
	// no shared group's or where its group first appears. Each result is
	// written after a comma; the first comma is dropped.
	layout := newSARIFLayout(indent)
	// The pieces (hundreds of KB each) go straight to w.
	if err := b.Flush(); err != nil {
		return err
	}
	cw := &firstByteCut{w: w}
	err = writeBatches(cw, set, func(x []byte, first int, fs []Finding) ([]byte, error) {
		var uriOf, uri string
		for k := range fs {
			fp := &fs[k]
			if fp.Status != Fail && fp.Status != Inconclusive {
				continue
			}
			g := shared[hashes[first+k]]
			switch {
			case g == nil:
				g = &sarifGroup{f: *fp, targets: slices.Clone(findingTargets(fp))}
			case g.first != first+k:
				continue
			}
			if g.f.File != uriOf || uri == "" {
				uriOf, uri = g.f.File, s.uri(g.f.File)
			}
			x = append(x, ",\n"...)
			x = append(x, indent...)
			x = s.appendResult(x, layout, ruleIndex[g.f.Check], uri, g)
		}
		return x, nil
	})
	if err != nil {
		return err
	}
	if !cw.cut {
		// "results": [] on one line.
		tail = tail[1+len(indent)-2:]
	}
	b.Write(tail)
	b.WriteString("\n")
	return b.Flush()
}

// firstByteCut writes to w all but the first byte written to it.
type firstByteCut struct {
	w   io.Writer
	cut bool
}

func (c *firstByteCut) Write(p []byte) (int, error) {
	if c.cut || len(p) == 0 {
		return c.w.Write(p)
	}
	c.cut = true
	n, err := c.w.Write(p[1:])
	return n + 1, err
}

// writeWhole is Write with every group in memory (two keys shared a hash).
func (s SARIF) writeWhole(w io.Writer, run Run) error {
	var groups []*sarifGroup
	byKey := map[string]*sarifGroup{}
	pre := s.newPrelude()
	err := run.Set().Each(func(fp *Finding) error {
		if !pre.see(fp) {
			return nil
		}
		f := *fp
		key := sarifKey(&f)
		g := byKey[key]
		if g == nil {
			g = &sarifGroup{f: f, seen: map[string]bool{}}
			byKey[key] = g
			groups = append(groups, g)
		}
		for _, t := range findingTargets(&f) {
			if !g.seen[t] {
				g.seen[t] = true
				g.targets = append(g.targets, t)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	r := s.newRun(run, pre)
	for _, g := range groups {
		r.AddResult(s.result(r, g))
	}
	rep := sarif.NewReport()
	rep.AddRun(r)
	if err := rep.PrettyWrite(w); err != nil {
		return err
	}
	_, err = io.WriteString(w, "\n")
	return err
}

// sarifPrelude is what a report says before its results, gathered in a
// pass over the findings.
type sarifPrelude struct {
	known map[string]bool
	// extraRules are the checks met in findings that no declared rule
	// describes, in the order met; notifications are the findings that
	// could not be checked.
	extraRules    []SARIFRule
	notifications []string
}

func (s SARIF) newPrelude() *sarifPrelude {
	pre := &sarifPrelude{known: map[string]bool{}}
	for _, rule := range s.Rules {
		pre.known[rule.ID] = true
	}
	return pre
}

// see takes one finding and reports whether it is a result.
func (pre *sarifPrelude) see(f *Finding) bool {
	switch f.Status {
	case Fail, Inconclusive:
	case Pass, Skip:
		return false
	default:
		// Could not check: about the run, not about a line of code.
		pre.notifications = append(pre.notifications, notification(f))
		return false
	}
	pre.meet(f)
	return true
}

// meet takes the check of a result: a rule of its own, with the finding's
// severity, if none describes it.
func (pre *sarifPrelude) meet(f *Finding) {
	if !pre.known[f.Check] {
		pre.known[f.Check] = true
		pre.extraRules = append(pre.extraRules, SARIFRule{ID: f.Check, Severity: f.Severity})
	}
}

// notification is what the invocation says of a finding that could not
// be checked.
func notification(f *Finding) string {
	return fmt.Sprintf("%s %s: could not check: %s", f.Name(), f.Target, f.Actual)
}

// newRun is the run without results: the tool with every rule (the
// declared ones, then those met only in findings, in order) and the
// invocation with its notifications, then the run's notes.
func (s SARIF) newRun(run Run, pre *sarifPrelude) *sarif.Run {
	r := sarif.NewRunWithInformationURI("sandprobe", "https://github.com/sandprobe/sandprobe")
	r.Tool.Driver.WithVersion(orDash(run.Version))
	if run.BuildDate != "" {
		r.Tool.Driver.WithReleaseDateUtc(run.BuildDate)
	}
	if run.Commit != "" {
		pb := sarif.NewPropertyBag()
		pb.Add("commit", run.Commit)
		r.Tool.Driver.WithProperties(pb)
	}
	for _, rule := range s.Rules {
		s.addRule(r, rule)
	}
	for _, rule := range pre.extraRules {
		s.addRule(r, rule)
	}
	inv := sarif.NewInvocation().WithExecutionSuccessful(run.ExitCode() != ExitCouldNotRun)
	for _, n := range pre.notifications {
		inv.AddToolExecutionNotification(sarif.NewNotification().WithLevel(sarif.LevelError).WithMessage(sarif.NewTextMessage(n)))
	}
	for _, n := range run.Notes {
		inv.AddToolExecutionNotification(sarif.NewNotification().WithLevel(sarif.LevelNote).WithMessage(sarif.NewTextMessage(n)))
	}
	r.AddInvocation(inv)
	return r
}

// sarifResultMark stands in for the results while the frame is written.
const sarifResultMark = "sandprobe-results-go-here"

// sarifFrame is the report go-sarif writes for r cut around its results:
// head ends with `"results": [`, tail starts with the newline before the
// array's `]`, and indent is the results' indentation.
func sarifFrame(r *sarif.Run) (head, tail []byte, indent string, err error) {
	r.AddResult(sarif.NewRuleResult(sarifResultMark))
	rep := sarif.NewReport()
	rep.AddRun(r)
	var buf bytes.Buffer
	if err := rep.PrettyWrite(&buf); err != nil {
		return nil, nil, "", err
	}
	r.Results = r.Results[:0]
	out := buf.Bytes()
	at := bytes.Index(out, []byte(`"`+sarifResultMark+`"`))
	open := bytes.LastIndex(out[:max(at, 0)], []byte(`"results": [`))
	if at < 0 || open < 0 {
		return nil, nil, "", errors.New("sarif: go-sarif wrote no results array")
	}
	open += len(`"results": [`)
	// The placeholder is one object: "\n" + indent + "{" ... "\n" + indent + "}".
	lineStart := bytes.LastIndexByte(out[:at], '\n') + 1
	first := bytes.IndexByte(out[open:], '{') + open
	indent = string(out[open+1 : first])
	end := bytes.Index(out[first:], []byte("\n"+indent+"}"))
	if end < 0 || lineStart <= open || strings.Trim(indent, " ") != "" {
		return nil, nil, "", errors.New("sarif: unexpected go-sarif layout")
	}
	end += first + len("\n"+indent+"}")
	return out[:open], out[end:], indent, nil
}

// sarifKey is what makes findings one result: the same finding on the
// same line, whichever targets it was reported for.
func sarifKey(f *Finding) string {
	return strings.Join([]string{f.Check, string(f.Status), f.File, fmt.Sprint(f.Line), f.Namespace, f.Subject, f.Expected, f.Actual}, "\x00")
}

func sarifKeyHash(seed maphash.Seed, f *Finding) uint64 {
	// The parts, each followed by a NUL, hashed at once from a buffer on
	// the stack when they fit.
	var scratch [512]byte
	key := scratch[:0]
	for _, part := range [...]string{f.Check, string(f.Status), f.File} {
		key = append(append(key, part...), 0)
	}
	key = append(strconv.AppendInt(key, int64(f.Line), 10), 0)
	for _, part := range [...]string{f.Namespace, f.Subject, f.Expected, f.Actual} {
		key = append(append(key, part...), 0)
	}
	return maphash.Bytes(seed, key)
}

func (s SARIF) addRule(r *sarif.Run, rule SARIFRule) {
	props := sarif.NewPropertyBag().WithTags([]string{"security", "sandbox"})
	if score := rule.Severity.SecurityScore(); score != "" {
		props.Add("security-severity", score)
	}
	d := r.AddRule(rule.ID).
		WithDefaultConfiguration(sarif.NewReportingConfiguration().WithLevel(sarif.LevelError)).
		WithProperties(props)
	if rule.Proves != "" {
		d.WithShortDescription(sarif.NewMultiformatMessageString().WithText(rule.Proves))
	}
	if rule.Fix != "" {
		d.WithHelp(sarif.NewMultiformatMessageString().WithText("Fix: " + rule.Fix))
	}
	if rule.HelpURI != "" {
		d.WithHelpURI(rule.HelpURI)
	}
}

// result is a group's result (not added to r).
func (s SARIF) result(r *sarif.Run, g *sarifGroup) *sarif.Result {
	f := g.f
	level := sarif.LevelError
	if f.Status == Inconclusive {
		level = sarif.LevelWarning
	}
	msg := s.resultText(g)
	res := sarif.NewRuleResult(f.Check).WithRuleIndex(r.GetRuleIndex(f.Check)).
		WithLevel(level).
		WithMessage(sarif.NewTextMessage(msg))
	loc := sarif.NewLocation()
	if f.File != "" {
		region := sarif.NewRegion().WithStartLine(max(f.Line, 1))
		loc.WithPhysicalLocation(sarif.NewPhysicalLocation().
			WithArtifactLocation(sarif.NewSimpleArtifactLocation(s.uri(f.File))).
			WithRegion(region))
	}
	for _, t := range g.targets {
		loc.AddLogicalLocation(sarif.NewLogicalLocation().WithFullyQualifiedName(t).WithKind("resource"))
	}
	res.AddLocation(loc)
	fp := sarifFingerprint(&f, s.uri(f.File), g.targets)
	res.WithPartialFingerprints(map[string]string{sarifFingerprintKey: string(fp[:])})
	props := sarif.NewPropertyBag()
	for _, kv := range [][2]string{{"expected", f.Expected}, {"actual", f.Actual}, {"fix", f.Fix}, {"evidence", f.Evidence}, {"namespace", f.Namespace}} {
		if kv[1] != "" {
			props.Add(kv[0], kv[1])
		}
	}
	res.WithProperties(props)
	return res
}

// sarifFingerprintKey names the fingerprint's recipe (v1 left the object
// out: two pods with the same drift in one file shared a fingerprint, and
// code scanning took them for one alert).
const sarifFingerprintKey = "sandprobeFinding/v2"

// sarifFingerprint identifies a result across runs, in hex: its check,
// file, namespace, field and what was expected and found, and the object
// when the result is about one (a result shared by several objects names
// the shared one in its subject) — not its line, so a result keeps its
// identity when the lines above it move.
func sarifFingerprint(f *Finding, uri string, targets []string) [32]byte {
	// The parts joined by NULs, hashed from a buffer on the stack when
	// they fit.
	var scratch [512]byte
	key := scratch[:0]
	for i, part := range [...]string{f.Check, uri, f.Namespace, f.Subject, f.Expected, f.Actual} {
		if i > 0 {
			key = append(key, 0)
		}
		key = append(key, part...)
	}
	if len(targets) == 1 {
		key = append(append(key, 0), targets[0]...)
	}
	sum := sha256.Sum256(key)
	var out [32]byte
	hex.Encode(out[:], sum[:16])
	return out
}

// sarifLayout is the fixed text of a result at one indentation, in the
// runs between the values: a result is a few KB of mostly fixed text.
type sarifLayout struct {
	open, afterSum, levelError, levelWarning, locations, targetOpen, targetClose, targetsEnd  string
	physical, region, physicalEnd, message, properties, propKey, bagEnd, rank, ruleIndex, end string
}

func newSARIFLayout(in string) *sarifLayout {
	i1, i2, i3, i4, i5 := "\n"+in+"  ", "\n"+in+"    ", "\n"+in+"      ", "\n"+in+"        ", "\n"+in+"          "
	l := &sarifLayout{
		open:         "{" + i1 + `"partialFingerprints": {` + i2 + `"` + sarifFingerprintKey + `": "`,
		afterSum:     `"` + i1 + "},",
		levelError:   `"error",`,
		levelWarning: `"warning",`,
		locations: i1 + `"locations": [` + i2 + "{" + i3 + `"annotations": [],` + i3 + `"id": -1,` +
			i3 + `"logicalLocations": [`,
		targetOpen:  i4 + "{" + i5 + `"fullyQualifiedName": `,
		targetClose: "," + i5 + `"index": -1,` + i5 + `"kind": "resource",` + i5 + `"parentIndex": -1` + i4 + "}",
		targetsEnd:  i3,
		physical: i3 + `"physicalLocation": {` + i4 + `"artifactLocation": {` + i5 + `"index": -1,` +
			i5 + `"uri": `,
		region: i4 + "}," + i4 + `"region": {` + i5 + `"byteOffset": -1,` + i5 + `"charOffset": -1,` +
			i5 + `"startLine": `,
		physicalEnd: i4 + "}" + i3 + "},",
		message: i3 + `"relationships": []` + i2 + "}" + i1 + "]," + i1 + `"message": {` + i2 + `"arguments": [],` +
			i2 + `"text": `,
		properties: i1 + "}," + i1 + `"properties": {`,
		propKey:    i2 + `"`,
		bagEnd:     i1,
		rank:       "}," + i1 + `"rank": -1,` + i1 + `"relatedLocations": [],` + i1 + `"ruleId": `,
		ruleIndex:  "," + i1 + `"ruleIndex": `,
		end:        "," + i1 + `"stacks": [],` + i1 + `"taxa": []` + "\n" + in + "}",
	}
	for _, k := range []string{"attachments", "codeFlows", "fixes", "graphTraversals", "graphs"} {
		l.afterSum += i1 + `"` + k + `": [],`
	}
	l.afterSum += i1 + `"kind": "fail",` + i1 + `"level": `
	return l
}

// appendResult writes g's result exactly as json.MarshalIndent(s.result(r,
// g), in, "  ") does, where l is newSARIFLayout(in)
// (TestSARIFResultMatchesGoSARIF), without building go-sarif's tree and
// reflecting over it (reflection was most of SARIF's cost).
func (s SARIF) appendResult(x []byte, l *sarifLayout, ruleIndex int, uri string, g *sarifGroup) []byte {
	f := &g.f
	hexSum := sarifFingerprint(f, uri, g.targets)
	x = append(x, l.open...)
	x = append(x, hexSum[:]...)
	x = append(x, l.afterSum...)
	if f.Status == Inconclusive {
		x = append(x, l.levelWarning...)
	} else {
		x = append(x, l.levelError...)
	}
	x = append(x, l.locations...)
	for ti, t := range g.targets {
		if ti > 0 {
			x = append(x, ',')
		}
		x = append(x, l.targetOpen...)
		x = AppendJSONString(x, t)
		x = append(x, l.targetClose...)
	}
	if len(g.targets) > 0 {
		x = append(x, l.targetsEnd...)
	}
	x = append(x, `],`...)
	if f.File != "" {
		x = append(x, l.physical...)
		x = AppendJSONString(x, uri)
		x = append(x, l.region...)
		x = strconv.AppendInt(x, int64(max(f.Line, 1)), 10)
		x = append(x, l.physicalEnd...)
	}
	x = append(x, l.message...)
	x = s.appendResultText(x, g)
	x = append(x, l.properties...)
	props := 0
	for _, kv := range [...][2]string{{"actual", f.Actual}, {"evidence", f.Evidence}, {"expected", f.Expected}, {"fix", f.Fix}, {"namespace", f.Namespace}} {
		if kv[1] == "" {
			continue
		}
		if props > 0 {
			x = append(x, ',')
		}
		props++
		x = append(x, l.propKey...)
		x = append(x, kv[0]...)
		x = append(x, `": `...)
		x = AppendJSONString(x, kv[1])
	}
	if props > 0 {
		x = append(x, l.bagEnd...)
	}
	x = append(x, l.rank...)
	x = AppendJSONString(x, f.Check)
	x = append(x, l.ruleIndex...)
	x = strconv.AppendInt(x, int64(ruleIndex), 10)
	return append(x, l.end...)
}

// appendResultText appends resultText(g) as a JSON string, a part at a
// time: every part is joined to the next by ASCII, so quoting the parts
// one by one writes what quoting the whole would.
func (s SARIF) appendResultText(x []byte, g *sarifGroup) []byte {
	f := &g.f
	x = append(x, '"')
	if f.Subject != "" {
		x = appendJSONInner(x, f.Subject)
		x = append(x, ": "...)
	}
	x = append(x, "expected "...)
	x = appendJSONInner(x, orDash(f.Expected))
	x = append(x, ", actual "...)
	x = appendJSONInner(x, orDash(f.Actual))
	if f.Fix != "" {
		x = append(x, ". Fix: "...)
		x = appendJSONInner(x, f.Fix)
	}
	for i, t := range g.targets {
		if i == 0 {
			x = append(x, ". Affects "...)
		} else {
			x = append(x, ", "...)
		}
		x = appendJSONInner(x, t)
	}
	return append(x, '"')
}

// findingTargets are the sandboxes a finding names: those a shared
// object's finding affects, else its target (none when it has none).
func findingTargets(f *Finding) []string {
	switch {
	case len(f.Affects) > 0:
		return f.Affects
	case f.Target != "":
		return []string{f.Target}
	}
	return nil
}

// resultText is a result's message.
func (s SARIF) resultText(g *sarifGroup) string {
	f := &g.f
	msg := "expected " + orDash(f.Expected) + ", actual " + orDash(f.Actual)
	if f.Subject != "" {
		msg = f.Subject + ": " + msg
	}
	if f.Fix != "" {
		msg += ". Fix: " + f.Fix
	}
	if len(g.targets) > 0 {
		msg += ". Affects " + strings.Join(g.targets, ", ")
	}
	return msg
}

// uri is the artifact URI of a file: relative to BaseDir with forward
// slashes when it is inside it, else an absolute file:// URI.
func (s SARIF) uri(file string) string {
	if file == "" {
		return ""
	}
	abs := file
	if !filepath.IsAbs(abs) && s.BaseDir != "" {
		abs = filepath.Join(s.BaseDir, file)
	}
	if s.BaseDir != "" {
		if rel, err := filepath.Rel(s.BaseDir, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return filepath.ToSlash(rel)
		}
	}
	if filepath.IsAbs(abs) {
		return "file://" + filepath.ToSlash(abs)
	}
	return filepath.ToSlash(filepath.Clean(file))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
