package runner

import (
	"os"
	"path/filepath"
)

// ProbeBinaryName is the small probe binary (cmd/sandprobe-probe): the
// sandprobe image and `make build` put it beside sandprobe.
const ProbeBinaryName = "sandprobe-probe"

// ProbeBeside is the binary a backend hands the sandbox when the user named
// none: sandprobe-probe beside the sandprobe binary bin, which carries
// only the probe (a third of the size, no Kubernetes, Docker or Prometheus
// client), else bin itself, whose `probe` subcommand is the same command.
// Both take the same command line (`BINARY probe --policy …`).
func ProbeBeside(bin string) string {
	small := filepath.Join(filepath.Dir(bin), ProbeBinaryName)
	if fi, err := os.Stat(small); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return small
	}
	return bin
}
