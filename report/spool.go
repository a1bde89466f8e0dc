package report

import "github.com/sandprobe/sandprobe/internal/findingset"

// The findings of a run as the writers read them live in
// internal/findingset; these names keep report's callers unchanged.
type (
	// FindingSet is findingset.Set: how the writers read a run's
	// findings, grouped by target, whole or a group at a time.
	FindingSet = findingset.Set
	// Group is findingset.Group: one target's findings' tallies.
	Group = findingset.Group
	// Spool is findingset.Spool: findings kept encoded, spilled to an
	// unlinked temporary file past a bound.
	Spool = findingset.Spool
)

// DefaultSpoolMemory is how many bytes of encoded findings a Spool keeps in
// memory before it moves them to a temporary file.
const DefaultSpoolMemory = findingset.DefaultSpoolMemory

// NewSpool returns an empty spool that keeps up to memMax bytes of
// encoded findings in memory (0 for DefaultSpoolMemory; negative to
// spill at once) and the rest in a temporary file in dir ("" for
// os.TempDir()).
func NewSpool(dir string, memMax int) *Spool { return findingset.NewSpool(dir, memMax) }

// Set is the run's findings as a FindingSet: the spool when the run has
// one, its Findings otherwise.
func (r Run) Set() FindingSet {
	if r.Spooled != nil {
		return r.Spooled
	}
	return findingset.Slice(r.Findings)
}
