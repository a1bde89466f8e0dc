package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// generatedRun is a big, ugly run: targets interleaved and repeated (a
// target's findings are not contiguous), every status, strings with what
// the encoders escape (HTML, quotes, control characters, invalid UTF-8,
// U+2028, newlines), attempts, odd seconds and an empty target.
func generatedRun(n int, seed uint64) Run {
	rng := rand.New(rand.NewPCG(seed, 1))
	nasty := []string{"", "plain", "a <b> & \"c\" 'd'", "tab\there\nnew\rcr", "\x00\x01\x1f\x7f", "bad \xff\xfe utf8", "line\u2028para\u2029", "ünïcødé ☃ 𝄞", "\ufffd", "{\"json\": [1]}", "]]> <![CDATA[", strings.Repeat("long ", 40)}
	pick := func() string { return nasty[rng.IntN(len(nasty))] }
	statuses := []Status{Pass, Fail, Skip, Inconclusive, Error, "weird"}
	secs := []float64{0, 0.001, 1e-7, 3.14159, 1e22, 12345.678, -0.5}
	run := Run{Policy: "agent <sandbox>", Version: "v1 & \"2\"", Backend: "drift",
		StartedAt: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC), Seconds: 1.25,
		Phases: map[string]float64{"drift": 1.25}, Scanned: n, DeclaredNamespaces: 1,
		Notes: []string{"a note with \"quotes\" and <tags>", "\n  \"findings\": [] inside a note"}}
	for i := 0; i < n; i++ {
		f := Finding{
			Check: "drift.pod." + []string{"privileged", "cap-drop", "seccomp"}[rng.IntN(3)], Target: "pod/ns/p-" + fmt.Sprint(rng.IntN(n/3+1)),
			Subject: pick(), Namespace: pick(), Status: statuses[rng.IntN(len(statuses))],
			Expected: pick(), Actual: pick(), Fix: pick(), Evidence: pick(), Class: pick(), Seconds: secs[rng.IntN(len(secs))],
		}
		if rng.IntN(3) == 0 {
			f.File, f.Line = pick(), rng.IntN(5000)-1
		}
		switch rng.IntN(10) {
		case 0:
			f.Target = ""
		case 1:
			f.Target = pick()
		case 2:
			f.Check = "egress.must-fail"
			f.Attempt = &Attempt{Attempted: true, Started: 0.25, Waited: 3, Timeout: 3, StoppedBy: StoppedByNetwork, Errno: "ETIMEDOUT", Signal: pick()}
		}
		run.Findings = append(run.Findings, f)
	}
	for i := 0; i < n%7; i++ {
		run.Probes = append(run.Probes, ProbeResult{Schema: ProbeResultSchema, Target: pick(), Nonce: pick(), Policy: "p",
			StartedAt: run.StartedAt, Seconds: secs[rng.IntN(len(secs)-2)], Findings: run.Findings[:min(len(run.Findings), i*3)]})
	}
	return run
}

// spooled is run with its findings moved into a spool.
func spooled(t *testing.T, run Run, memMax int) Run {
	t.Helper()
	sp := NewSpool(t.TempDir(), memMax)
	t.Cleanup(func() { sp.Close() })
	sp.Add(run.Findings...)
	if err := sp.Err(); err != nil {
		t.Fatal(err)
	}
	run.Findings, run.Spooled = nil, sp
	return run
}

// TestWritersMatchLegacy: the streaming writers print exactly what the
// writers that built the whole report in memory printed (legacy_test.go),
// for the golden run, an empty run and generated runs, whether the
// findings are a slice, a spool in memory or a spool spilled to a file.
func TestWritersMatchLegacy(t *testing.T) {
	empty := sampleRun()
	empty.Findings = nil
	probesOnly := generatedRun(13, 3)
	probesOnly.Findings = nil
	// Many findings on one line of one policy, for many targets (some
	// twice): the SARIF results that group them.
	shared := generatedRun(600, 4)
	for i := range shared.Findings {
		if f := &shared.Findings[i]; i%3 == 0 {
			f.Subject, f.Expected, f.Actual, f.Namespace, f.File, f.Line = "networkpolicy/open spec.egress[0]", "no world", "0.0.0.0/0", "ns", "np.yaml", 7
		}
	}
	// Each target's findings one after another, as drift adds them: the
	// spool's groups are runs, read in one piece per batch.
	grouped := generatedRun(3000, 6)
	slices.SortStableFunc(grouped.Findings, func(a, b Finding) int { return strings.Compare(a.Target, b.Target) })
	runs := map[string]Run{"sample": sampleRun(), "grouped-3000": grouped, "empty": empty, "generated-50": generatedRun(50, 1), "generated-3000": generatedRun(3000, 2),
		"generated-13-probes": generatedRun(13, 3), "probes-no-findings": probesOnly, "shared": shared}
	legacy := map[string]func(Run) []byte{
		"text":         func(r Run) []byte { var b bytes.Buffer; legacyText(Text{}, &b, r); return b.Bytes() },
		"text-color":   func(r Run) []byte { var b bytes.Buffer; legacyText(Text{Color: true}, &b, r); return b.Bytes() },
		"text-verbose": func(r Run) []byte { var b bytes.Buffer; legacyText(Text{Verbose: true}, &b, r); return b.Bytes() },
		"json":         func(r Run) []byte { var b bytes.Buffer; legacyJSON(&b, r); return b.Bytes() },
		"junit":        func(r Run) []byte { var b bytes.Buffer; legacyJUnit(&b, r); return b.Bytes() },
		"sarif":        func(r Run) []byte { var b bytes.Buffer; legacySARIF(SARIF{}, &b, r); return b.Bytes() },
		"sarif-rules": func(r Run) []byte {
			var b bytes.Buffer
			legacySARIF(sarifWithRules, &b, r)
			return b.Bytes()
		},
	}
	writers := map[string]Writer{"text": Text{}, "text-color": Text{Color: true}, "text-verbose": Text{Verbose: true}, "json": JSON{}, "junit": JUnit{}, "sarif": SARIF{}, "sarif-rules": sarifWithRules}
	for rname, run := range runs {
		// spool-spills grows its memory to the bound, then moves to a file
		// part way (the big runs).
		forms := map[string]Run{"slice": run, "spool-memory": spooled(t, run, 1<<30), "spool-file": spooled(t, run, -1), "spool-spills": spooled(t, run, 300<<10)}
		if len(run.Findings) > 0 && (!forms["spool-file"].Spooled.Spilled() || forms["spool-memory"].Spooled.Spilled()) {
			t.Fatal("spool did not spill as asked")
		}
		if rname == "grouped-3000" && !forms["spool-file"].Spooled.GroupRuns() {
			t.Fatal("grouped run: the spool's groups are not runs")
		}
		for wname, w := range writers {
			want := legacy[wname](run)
			for form, r := range forms {
				t.Run(rname+"/"+wname+"/"+form, func(t *testing.T) {
					var got bytes.Buffer
					if err := w.Write(&got, r); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got.Bytes(), want) {
						t.Errorf("differs from the legacy writer at byte %d:\n got %.300q\nwant %.300q", diffAt(got.Bytes(), want), tail(got.Bytes(), diffAt(got.Bytes(), want)), tail(want, diffAt(got.Bytes(), want)))
					}
				})
			}
		}
		if got, want := forms["spool-file"].ExitCode(), run.ExitCode(); got != want {
			t.Errorf("%s: spooled exit %d, want %d", rname, got, want)
		}
	}
}

func diffAt(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func tail(b []byte, i int) []byte { return b[max(0, i-40):min(len(b), i+200)] }

// everyField fills every field of a Finding by reflection, so a field
// added later is covered by the encoders' tests without editing them.
func everyField(t *testing.T, s string, sec float64) Finding {
	t.Helper()
	var f Finding
	v := reflect.ValueOf(&f).Elem()
	for i := 0; i < v.NumField(); i++ {
		fv := v.Field(i)
		switch fv.Kind() {
		case reflect.String:
			fv.SetString(s + "-" + v.Type().Field(i).Name)
		case reflect.Float64:
			fv.SetFloat(sec)
		case reflect.Int:
			fv.SetInt(int64(len(s)*7 - 3))
		case reflect.Struct:
			switch fv.Type() {
			case reflect.TypeFor[Location]():
				fv.Set(reflect.ValueOf(Location{Namespace: s + "-ns", Node: s + "-node", Stray: s + "-as", Control: len(s)%2 == 1}))
			case reflect.TypeFor[Judge]():
				fv.Set(reflect.ValueOf(Judge{Unserved: len(s)%2 == 1, FollowUp: true}))
			default:
				t.Fatalf("Finding.%s: a new struct field — teach encodeFinding and appendFindingJSON about it", v.Type().Field(i).Name)
			}
		case reflect.Pointer:
			if fv.Type() != reflect.TypeFor[*Attempt]() {
				t.Fatalf("Finding.%s: a new pointer field — teach encodeFinding and appendFindingJSON about it", v.Type().Field(i).Name)
			}
			fv.Set(reflect.ValueOf(&Attempt{Attempted: true, Started: sec, Waited: 1, Timeout: 3, Errno: s}))
		case reflect.Slice:
			if fv.Type() != reflect.TypeFor[[]string]() {
				t.Fatalf("Finding.%s: a new slice field — teach encodeFinding and appendFindingJSON about it", v.Type().Field(i).Name)
			}
			fv.Set(reflect.ValueOf([]string{s + "-" + v.Type().Field(i).Name, "", s}))
		default:
			t.Fatalf("Finding.%s: a %s field — teach encodeFinding and appendFindingJSON about it", v.Type().Field(i).Name, fv.Kind())
		}
	}
	return f
}

// TestFindingJSONMatchesEncoding: the hand-written finding encoder agrees
// with encoding/json on every field and on the strings and numbers it
// escapes and formats.
func TestFindingJSONMatchesEncoding(t *testing.T) {
	var cases []Finding
	for _, s := range []string{"x", "<&>", "\"\\", "\b\f\n\r\t\x00\x1f", "\xff", "\u2028\u2029", "☃𝄞", ""} {
		for _, sec := range []float64{0, 1, 1e-6, 9.9e-7, 1e20, 1e21, 123.456, -2.5e-9, 5e-324} {
			cases = append(cases, everyField(t, s, sec))
		}
	}
	cases = append(cases, Finding{Check: "only.check"}, Finding{})
	for _, f := range cases {
		want, err := json.MarshalIndent(f, "    ", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendFindingJSON(nil, &f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("finding %+v:\n got %s\nwant %s", f, got, want)
		}
	}
}

// TestSpoolRoundTrip: a spilled finding comes back equal, every field.
func TestSpoolRoundTrip(t *testing.T) {
	fs := []Finding{everyField(t, "a", 1.5), everyField(t, "\xff\x00", 0), {}, {Target: "t"}}
	for _, memMax := range []int{-1, 1 << 20} {
		sp := NewSpool(t.TempDir(), memMax)
		sp.Add(fs...)
		got, err := sp.Slice()
		sp.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, fs) {
			t.Errorf("memMax %d: round trip\n got %+v\nwant %+v", memMax, got, fs)
		}
	}
}

// sarifWithRules declares some of generatedRun's checks (not all: the
// others become rules as they are met), with a base directory.
var sarifWithRules = SARIF{BaseDir: "/repo", Rules: []SARIFRule{
	{ID: "drift.pod.cap-drop", Proves: "drops <ALL>", Fix: "drop & \"ALL\"", HelpURI: "https://x/y"},
	{ID: "drift.pod.seccomp"}, {ID: "unused.rule", Proves: "never met"},
}}

// TestSARIFWholeMatchesLegacy: the in-memory way SARIF.Write takes when two
// keys share a hash prints the same bytes.
func TestSARIFWholeMatchesLegacy(t *testing.T) {
	shared := generatedRun(300, 8)
	for i := range shared.Findings {
		if f := &shared.Findings[i]; i%4 == 0 {
			f.Subject, f.Expected, f.Actual, f.Namespace, f.File, f.Line = "s", "e", "a", "n", "f.yaml", 3
		}
	}
	for _, run := range []Run{generatedRun(0, 1), generatedRun(400, 7), sampleRun(), shared} {
		for _, s := range []SARIF{{}, sarifWithRules} {
			var got, want bytes.Buffer
			if err := s.writeWhole(&got, run); err != nil {
				t.Fatal(err)
			}
			legacySARIF(s, &want, run)
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("differs at byte %d", diffAt(got.Bytes(), want.Bytes()))
			}
		}
	}
}

// TestSARIFResultMatchesGoSARIF: every result SARIF.Write appends by hand
// is byte for byte what go-sarif's tree marshals to, at the indentation of
// the results, for every group of generated runs (one target, several,
// none; with a file and without; error and warning levels; every property
// empty or not; what the encoder escapes).
func TestSARIFResultMatchesGoSARIF(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		run := generatedRun(500, seed)
		for _, s := range []SARIF{{}, sarifWithRules} {
			pre := s.newPrelude()
			var groups []*sarifGroup
			byKey := map[string]*sarifGroup{}
			for i := range run.Findings {
				f := run.Findings[i]
				if !pre.see(&f) {
					continue
				}
				g := byKey[sarifKey(&f)]
				if g == nil {
					g = &sarifGroup{f: f, seen: map[string]bool{}}
					byKey[sarifKey(&f)] = g
					groups = append(groups, g)
				}
				if f.Target != "" && !g.seen[f.Target] {
					g.seen[f.Target] = true
					g.targets = append(g.targets, f.Target)
				}
			}
			r := s.newRun(run, pre)
			for gi, g := range groups {
				if gi%3 == 0 {
					g.f.Expected, g.f.Actual, g.f.Fix, g.f.Evidence, g.f.Namespace = "", "", "", "", "" // an empty property bag
				}
				const in = "        "
				want, err := json.MarshalIndent(s.result(r, g), in, "  ")
				if err != nil {
					t.Fatal(err)
				}
				got := s.appendResult(nil, newSARIFLayout(in), r.GetRuleIndex(g.f.Check), s.uri(g.f.File), g)
				if !bytes.Equal(got, want) {
					t.Fatalf("result %d differs at byte %d:\n got %s\nwant %s", gi, diffAt(got, want), got, want)
				}
			}
		}
	}
}

// failAfter accepts n bytes, then fails every write, as a full disk does.
type failAfter struct{ n int }

var errDiskFull = errors.New("no space left on device")

func (w *failAfter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, errDiskFull
	}
	w.n -= len(p)
	return len(p), nil
}

// TestWritersReportWriteErrors: a writer whose output fails part way
// returns that error — wherever it fails, whichever core formatted the
// piece — and never a short report with no error.
func TestWritersReportWriteErrors(t *testing.T) {
	run := generatedRun(3000, 9)
	grouped := generatedRun(3000, 10)
	slices.SortStableFunc(grouped.Findings, func(a, b Finding) int { return strings.Compare(a.Target, b.Target) })
	writers := map[string]Writer{"text": Text{}, "json": JSON{}, "junit": JUnit{}, "sarif": SARIF{}}
	for rname, r := range map[string]Run{"generated": run, "grouped": grouped} {
		for form, fr := range map[string]Run{"slice": r, "spool-file": spooled(t, r, -1)} {
			for wname, w := range writers {
				var full bytes.Buffer
				if err := w.Write(&full, fr); err != nil {
					t.Fatal(err)
				}
				for _, at := range []int{0, 1, 100, full.Len() / 3, full.Len() - 1} {
					err := w.Write(&failAfter{n: at}, fr)
					if !errors.Is(err, errDiskFull) {
						t.Errorf("%s/%s/%s failing after %d of %d bytes: error %v, want the write's", rname, form, wname, at, full.Len(), err)
					}
				}
			}
		}
	}
}
