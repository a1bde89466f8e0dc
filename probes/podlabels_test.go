package probes

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandprobe/sandprobe/result"
)

func TestPodLabels(t *testing.T) {
	p := mustPolicy(t, "")
	cases := []struct {
		name, file string
		want       result.Status
	}{
		{"carries the selector's labels", "app=\"agent\"\nsandbox=\"true\"\n", result.Pass},
		{"label missing", "app=\"agent\"\n", result.Fail},
		{"label with another value", "sandbox=\"false\"\n", result.Fail},
		{"garbled file", "sandbox true\n", result.Error},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "labels"), []byte(c.file), 0o644)
			fs := checkPodLabels(context.Background(), &Env{Policy: p, PodInfoDir: dir})
			if len(fs) != 1 || fs[0].Status != c.want {
				t.Fatalf("%+v", fs)
			}
			if c.want == result.Fail && (fs[0].Expected == "" || fs[0].Actual == "") {
				t.Errorf("failure without expected/actual: %+v", fs[0])
			}
		})
	}
	fs := checkPodLabels(context.Background(), &Env{Policy: p, PodInfoDir: t.TempDir()})
	if fs[0].Status != result.Error {
		t.Errorf("no labels file must be an error, got %+v", fs)
	}
}
