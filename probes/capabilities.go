package probes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// capSets reads the five capability sets with syscalls (capget, prctl)
// rather than /proc text, which gVisor and some runtimes fill differently.
func capSets() (map[string]uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("capget: %w", err)
	}
	join := func(lo, hi uint32) uint64 { return uint64(lo) | uint64(hi)<<32 }
	sets := map[string]uint64{
		"CapEff": join(data[0].Effective, data[1].Effective),
		"CapPrm": join(data[0].Permitted, data[1].Permitted),
		"CapInh": join(data[0].Inheritable, data[1].Inheritable),
	}
	var bnd, amb uint64
	for c := 0; c < 64; c++ {
		v, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past CAP_LAST_CAP
		}
		if err != nil {
			return nil, fmt.Errorf("prctl(PR_CAPBSET_READ, %d): %w", c, err)
		}
		if v == 1 {
			bnd |= 1 << uint(c)
		}
		a, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, uintptr(c), 0, 0)
		if err == nil && a == 1 {
			amb |= 1 << uint(c)
		}
	}
	sets["CapBnd"] = bnd
	sets["CapAmb"] = amb
	return sets, nil
}

var capSetOrder = []string{"CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"}

func checkCapabilities(_ context.Context, env *Env) []result.Finding {
	sets, err := capSets()
	if err != nil {
		return []result.Finding{errorf("", "%v", err)}
	}
	allowed := env.Policy.Spec.Capabilities
	expected := "no capabilities"
	if len(allowed) > 0 {
		expected = "at most " + strings.Join(allowed, ", ")
	}
	status := procStatus()
	var out []result.Finding
	for _, name := range capSetOrder {
		have := policy.CapabilityNames(sets[name])
		var extra []string
		for _, c := range have {
			if !slices.Contains(allowed, c) {
				extra = append(extra, c)
			}
		}
		evidence := fmt.Sprintf("%s=%016x", name, sets[name])
		if line, ok := status[name]; ok {
			evidence += "; /proc/self/status " + name + ":\t" + line
		}
		actual := joinOr(have, "none")
		if len(extra) > 0 {
			out = append(out, fail(name, expected, actual, evidence))
		} else {
			out = append(out, pass(name, expected, actual, evidence))
		}
	}
	return out
}

// procStatus reads /proc/self/status into a map, for evidence only.
func procStatus() map[string]string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}
