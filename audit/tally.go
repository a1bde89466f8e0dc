// Package audit holds the egress record against the policy: which
// allowance each attempt used, which allowances nobody uses, which
// wildcards open user content to the sandbox, what the proxy denied, and
// what the declared policy would block that sandboxes reach today (the
// egress audit stage before a new or narrowed policy is enforced).
// egresslog reads the records; this package only counts and judges.
package audit

import (
	"slices"

	"github.com/sandprobe/sandprobe/egresslog"
)

// maxKeys bounds the distinct (sandbox, destination, decision) keys one
// tally keeps, so a record of random names cannot grow memory without
// end; past it, records are counted in Folded.
const maxKeys = 200_000

// stats is what the record says of one sandbox and one destination with
// one decision; the key holds which (Tally.key).
type stats struct {
	count, bytesOut, bytesIn int64
	first, last              int64 // Unix ms
	outKnown, inKnown        bool
}

func (s *stats) add(o stats) {
	s.count += o.count
	s.bytesOut += o.bytesOut
	s.bytesIn += o.bytesIn
	s.outKnown = s.outKnown || o.outKnown
	s.inKnown = s.inKnown || o.inKnown
	if o.first != 0 && (s.first == 0 || o.first < s.first) {
		s.first = o.first
	}
	s.last = max(s.last, o.last)
}

// entry is a stats with its names, as Judge reads it.
type entry struct {
	sandbox, host string
	port          int
	decision      egresslog.Decision
	stats
}

// Tally counts records by sandbox, destination and decision. It is an
// egresslog.Sink: one per scanning worker, merged afterwards. Sandboxes
// and hosts are interned (few, so their maps stay in cache) and the counts
// live in the map by one integer key: a string key and an entry pointer
// per record made the map the scan's bottleneck.
type Tally struct {
	hostIDs    map[string]uint32
	hosts      []string
	sandboxIDs map[string]uint32
	sandboxes  []string
	// keys index stats by one integer key (the slice keeps the map small
	// and gives a record a place to count in without a map write).
	keys    map[uint64]int32
	stats   []stats
	scratch []byte
	// The last record's sandbox, host, key and stats: a run of records
	// from one sandbox to one destination, as logs have them, skips the
	// interning and the map.
	lastSandbox, lastHost []byte
	lastKey               uint64
	lastIndex             int32
	probe                 int64
	marked                int64 // records that carry an agent or user field at all
	folded                int64
	total                 int64
}

// NewTally makes an empty tally.
func NewTally() *Tally {
	return &Tally{hostIDs: map[string]uint32{}, sandboxIDs: map[string]uint32{}, keys: map[uint64]int32{}, lastIndex: -1}
}

// intern returns the id of s in ids/names, adding it.
func intern(ids map[string]uint32, names *[]string, s []byte) uint32 {
	if id, ok := ids[string(s)]; ok {
		return id
	}
	id := uint32(len(*names))
	str := string(s)
	ids[str] = id
	*names = append(*names, str)
	return id
}

const idBits = 23

// key packs a sandbox id (23 bits), a host id (23 bits), the port (16)
// and the decision (2) into one map key.
func key(sb, host uint32, port int, d egresslog.Decision) uint64 {
	return uint64(sb&(1<<idBits-1))<<41 | uint64(host&(1<<idBits-1))<<18 | uint64(port&0xffff)<<2 | uint64(d&3)
}

func (t *Tally) entry(k uint64, s stats) entry {
	return entry{sandbox: t.sandboxes[k>>41], host: t.hosts[(k>>18)&(1<<idBits-1)], port: int(k>>2) & 0xffff, decision: egresslog.Decision(k & 3), stats: s}
}

// Add counts one record.
func (t *Tally) Add(r *egresslog.Record) {
	t.total++
	if len(r.Agent) > 0 || len(r.User) > 0 {
		t.marked++
		if ProbeMarked(r.Agent, r.User) {
			t.probe++
			return
		}
	}
	if len(r.Host) == 0 {
		return
	}
	sb := r.Sandbox
	if len(sb) == 0 {
		sb = r.Client
	}
	var k uint64
	if t.lastKey != 0 && string(sb) == string(t.lastSandbox) && string(r.Host) == string(t.lastHost) {
		k = t.lastKey&^(0xffff<<2|3) | uint64(r.Port&0xffff)<<2 | uint64(r.Decision&3)
	} else {
		if len(t.hosts) >= 1<<idBits-1 || len(t.sandboxes) >= 1<<idBits-1 {
			t.folded++
			return
		}
		t.scratch = appendHost(t.scratch[:0], r.Host)
		k = key(intern(t.sandboxIDs, &t.sandboxes, sb), intern(t.hostIDs, &t.hosts, t.scratch), r.Port, r.Decision)
		t.lastSandbox = append(t.lastSandbox[:0], sb...)
		t.lastHost = append(t.lastHost[:0], r.Host...)
	}
	k &^= 1 << 63
	var s *stats
	if t.lastIndex >= 0 && k == t.lastKey&^(1<<63) {
		s = &t.stats[t.lastIndex]
	} else {
		i, ok := t.keys[k]
		if !ok {
			if len(t.keys) >= maxKeys {
				t.folded++
				return
			}
			i = int32(len(t.stats))
			t.stats = append(t.stats, stats{})
			t.keys[k] = i
		}
		s = &t.stats[i]
		t.lastIndex = i
	}
	t.lastKey = k | 1<<63 // never 0, and sandbox ids stay below bit 63
	s.count++
	if r.BytesOut >= 0 {
		s.bytesOut += r.BytesOut
		s.outKnown = true
	}
	if r.BytesIn >= 0 {
		s.bytesIn += r.BytesIn
		s.inKnown = true
	}
	if r.Time != 0 {
		if s.first == 0 || r.Time < s.first {
			s.first = r.Time
		}
		s.last = max(s.last, r.Time)
	}
}

// each calls fn for every entry.
func (t *Tally) each(fn func(e entry)) {
	for k, i := range t.keys {
		fn(t.entry(k, t.stats[i]))
	}
}

// Merge adds another tally's counts to t.
func (t *Tally) Merge(o *Tally) {
	t.probe += o.probe
	t.marked += o.marked
	t.folded += o.folded
	t.total += o.total
	t.stats = slices.Grow(t.stats, len(o.stats))
	o.each(func(e entry) {
		k := key(intern(t.sandboxIDs, &t.sandboxes, []byte(e.sandbox)), intern(t.hostIDs, &t.hosts, []byte(e.host)), e.port, e.decision)
		i, ok := t.keys[k]
		if !ok {
			if len(t.keys) >= maxKeys {
				t.folded += e.count
				return
			}
			i = int32(len(t.stats))
			t.stats = append(t.stats, stats{})
			t.keys[k] = i
		}
		t.stats[i].add(e.stats)
	})
}

// appendHost appends a destination lower-cased (ASCII), without the
// trailing dot of a fully qualified name.
func appendHost(dst, host []byte) []byte {
	if n := len(host); n > 1 && host[n-1] == '.' {
		host = host[:n-1]
	}
	for _, c := range host {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// ProbeMarked reports whether a record is one of sandprobe's own attempts:
// its User-Agent starts with "sandprobe" or its proxy user with
// "sandprobe-" (docs/egress.md: how the probe marks its traffic).
func ProbeMarked(agent, user []byte) bool {
	return hasPrefixFold(agent, "sandprobe") || hasPrefixFold(user, "sandprobe-")
}

func hasPrefixFold(b []byte, lower string) bool {
	if len(b) < len(lower) {
		return false
	}
	for i := 0; i < len(lower); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
