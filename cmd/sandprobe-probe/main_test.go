package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/result"
)

// TestSameCommandAsSandprobeProbe: the small binary is `sandprobe probe`,
// word for word — same flags, same findings, same exit code, same
// termination message, same one-line problems for a bad policy — whether
// the runner's command line names the `probe` subcommand or not. Only
// read-only checks run here (identity, caps), in this process' own box.
func TestSameCommandAsSandprobeProbe(t *testing.T) {
	full, small := testenv.Binary(t), testenv.ProbeBinary(t)
	policyFile := filepath.Join("..", "..", "fixtures", "local-policy.yaml")
	type outcome struct {
		code     int
		findings []string
		term     []string
	}
	run := func(argv ...string) outcome {
		t.Helper()
		term := filepath.Join(t.TempDir(), "termination-log")
		args := append(argv[1:], "--policy", policyFile, "--nonce", "n-1", "--no-network", "--only", "identity,caps", "--termination-log", term)
		code, stdout, stderr := testenv.Exec(t, argv[0], args...)
		var res result.ProbeResult
		if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Nonce != "n-1" || res.Schema != result.ProbeResultSchema {
			t.Fatalf("%v: exit %d, not a probe result (%v):\n%s\n%s", argv, code, err, stdout, stderr)
		}
		msg, err := os.ReadFile(term)
		if err != nil {
			t.Fatal(err)
		}
		doc, compressed, err := result.DecodeTerminationMessage(string(msg))
		var back result.ProbeResult
		if err == nil {
			err = json.Unmarshal(doc, &back)
		}
		if err != nil || !compressed {
			t.Fatalf("%v: termination message: compressed %v, %v", argv, compressed, err)
		}
		o := outcome{code: code}
		for _, f := range res.Findings {
			o.findings = append(o.findings, f.Name()+" "+string(f.Status))
		}
		for _, f := range back.Findings {
			o.term = append(o.term, f.Name()+" "+string(f.Status))
		}
		return o
	}
	want := run(full, "probe")
	if len(want.findings) < 3 || !reflect.DeepEqual(want.findings, want.term) {
		t.Fatalf("sandprobe probe: %+v", want)
	}
	for _, argv := range [][]string{{small}, {small, "probe"}} {
		if got := run(argv...); !reflect.DeepEqual(got, want) {
			t.Errorf("%v:\n got %+v\nwant %+v (sandprobe probe)", argv, got, want)
		}
	}

	bad := filepath.Join("..", "..", "policy", "testdata", "invalid-negative-uid.yaml")
	wantCode, _, wantErr := testenv.Exec(t, full, "probe", "--policy", bad)
	code, stdout, stderr := testenv.Exec(t, small, "--policy", bad)
	if code != 2 || wantCode != 2 || stderr != wantErr || stdout != "" || !strings.Contains(stderr, bad+":") {
		t.Errorf("bad policy: exit %d (sandprobe probe: %d), stderr %q, want %q", code, wantCode, stderr, wantErr)
	}
}

// TestUsage: what the small binary refuses, it refuses in one line with
// exit 2; text output is the full binary's (no writer is linked here).
func TestUsage(t *testing.T) {
	small := testenv.ProbeBinary(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-o", "text", "--policy", "x.yaml"}, 2, "`sandprobe probe -o text`"},
		{[]string{"-o", "yaml", "--policy", "x.yaml"}, 2, `-o: want json or text, got "yaml"`},
		{[]string{"--nonce", "n"}, 2, "--policy is required"},
		{[]string{"--policy", "x.yaml", "stray"}, 2, `unexpected argument "stray"`},
		{[]string{"--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"install"}, 2, "Usage: sandprobe-probe install DEST"},
		{[]string{"probe", "-h"}, 0, "-only"},
		{[]string{"--policy", "p.yaml", "-h"}, 0, "-no-network"},
	} {
		code, _, stderr := testenv.Exec(t, small, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	if code, out, _ := testenv.Exec(t, small, "version"); code != 0 || !strings.HasPrefix(out, "sandprobe-probe ") {
		t.Errorf("version: %d %q", code, out)
	}
	if code, out, _ := testenv.Exec(t, small, "help"); code != 0 || !strings.Contains(out, "install DEST") {
		t.Errorf("help: %d %q", code, out)
	}
}

// TestInstallCopiesItself: the init container's `sandprobe-probe install
// DEST` leaves a runnable 0555 copy of the small binary, atomically.
func TestInstallCopiesItself(t *testing.T) {
	small := testenv.ProbeBinary(t)
	dest := filepath.Join(t.TempDir(), "sandprobe-probe")
	if code, _, stderr := testenv.Exec(t, small, "install", dest); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	fi, err := os.Stat(dest)
	src, _ := os.Stat(small)
	if err != nil || fi.Mode().Perm() != 0o555 || fi.Size() != src.Size() {
		t.Fatalf("%v %v", fi, err)
	}
	if code, out, _ := testenv.Exec(t, dest, "version"); code != 0 || !strings.HasPrefix(out, "sandprobe-probe ") {
		t.Fatalf("the copy does not run: %d %q", code, out)
	}
	if code, _, _ := testenv.Exec(t, small, "install", "/nonexistent-dir/sandprobe-probe"); code != 3 {
		t.Errorf("unwritable destination: exit %d, want 3", code)
	}
}
