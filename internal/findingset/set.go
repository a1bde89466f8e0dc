// Package findingset holds a run's findings as the report writers read
// them: a slice as it is, or a Spool that keeps hundreds of thousands of
// them encoded, in memory up to a bound and then in an unlinked temporary
// file. Both are a Set: grouped by target, read in order, whole or a
// group at a time, and in batches a worker can decode on its own core.
// The writers (package report) see only the Set.
package findingset

import "github.com/sandprobe/sandprobe/result"

// Set is how the writers read a run's findings: grouped by target in
// order of first appearance (a JUnit suite, a block of the text report),
// each group with its tallies, and each finding in the order it was added.
// Both forms — a slice (Slice) and a Spool — are read through it, so every
// writer is one pass per group and linear in the findings, whichever
// holds them.
type Set interface {
	Len() int
	Counts() result.Counts
	Groups() []Group
	// Each calls fn with every finding in the order added. f is only
	// valid during the call.
	Each(fn func(f *result.Finding) error) error
	// EachIn calls fn with every finding of Groups()[g], in the order added.
	EachIn(g int, fn func(f *result.Finding) error) error
	// NameWidth is the longest Name of a finding, in bytes (the text
	// report's column).
	NameWidth() int
	// Batches calls fn with every finding in order, in batches that a
	// worker on another core turns into findings (Batch.Findings).
	Batches(fn func(Batch) error) error
}

// Group is one target's findings: their tallies and summed seconds.
type Group struct {
	Target  string
	Counts  result.Counts
	Seconds float64
}

// Batch is a run of findings in order, numbers First to First+N-1: a part
// of a slice as it is, or records of a spool still encoded.
type Batch struct {
	First, N int
	fs       []result.Finding // a slice's, shared
	raw      rawBatch         // a spool's
}

// Findings is the batch's findings: a slice's own (not to be changed), or
// a spool's records decoded into a new slice. Safe for concurrent use.
func (b Batch) Findings() ([]result.Finding, error) {
	if b.raw.s == nil {
		return b.fs, nil
	}
	return b.raw.decode(make([]result.Finding, 0, b.N))
}

// sliceBatch is how many findings of a slice go in one Batch.
const sliceBatch = 512

// Slice indexes findings by target in one pass, as a Set.
func Slice(fs []result.Finding) Set {
	s := &sliceSet{fs: fs}
	index := map[string]int{}
	for i := range fs {
		g, ok := index[fs[i].Target]
		if !ok {
			g = len(s.groups)
			index[fs[i].Target] = g
			s.groups = append(s.groups, Group{Target: fs[i].Target})
			s.members = append(s.members, nil)
		}
		s.groups[g].Counts.Add(fs[i].Status)
		s.groups[g].Seconds += fs[i].Seconds
		s.members[g] = append(s.members[g], int32(i))
		s.width = max(s.width, nameWidth(&fs[i]))
	}
	return s
}

// sliceSet is a slice indexed by target.
type sliceSet struct {
	fs      []result.Finding
	groups  []Group
	members [][]int32
	width   int
}

// nameWidth is len(f.Name()) without building it.
func nameWidth(f *result.Finding) int {
	if f.Subject == "" {
		return len(f.Check)
	}
	return len(f.Check) + 1 + len(f.Subject)
}

func (s *sliceSet) NameWidth() int        { return s.width }
func (s *sliceSet) Len() int              { return len(s.fs) }
func (s *sliceSet) Counts() result.Counts { return result.Count(s.fs) }
func (s *sliceSet) Groups() []Group       { return s.groups }

func (s *sliceSet) Each(fn func(*result.Finding) error) error {
	for i := range s.fs {
		if err := fn(&s.fs[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *sliceSet) EachIn(g int, fn func(*result.Finding) error) error {
	for _, i := range s.members[g] {
		if err := fn(&s.fs[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *sliceSet) Batches(fn func(Batch) error) error {
	for first := 0; first < len(s.fs); first += sliceBatch {
		fs := s.fs[first:min(first+sliceBatch, len(s.fs))]
		if err := fn(Batch{First: first, N: len(fs), fs: fs}); err != nil {
			return err
		}
	}
	return nil
}
