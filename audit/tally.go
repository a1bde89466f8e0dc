// Package audit holds the egress record against the policy: which
// allowance each attempt used, which allowances nobody uses, which
// wildcards open user content to the sandbox, what the proxy denied, and
// what the declared policy would block that sandboxes reach today (the
// egress audit stage before a new or narrowed policy is enforced).
// egresslog reads the records; this package only counts and judges.
package audit

import (
	"github.com/sandprobe/sandprobe/egresslog"
)

// maxKeys bounds the distinct (sandbox, destination, decision) keys one
// tally keeps, so a record of random names cannot grow memory without
// end; past it, records are counted in Folded.
const maxKeys = 200_000

// stats is what the record says of one sandbox and one destination with
// one decision; the key holds which (Tally.key). A byte count that no
// record gave is -1.
type stats struct {
	count, bytesOut, bytesIn int64
	first, last              int64 // Unix ms
}

func (s *stats) add(o stats) {
	s.count += o.count
	s.bytesOut = addBytes(s.bytesOut, o.bytesOut)
	s.bytesIn = addBytes(s.bytesIn, o.bytesIn)
	if o.first != 0 && (s.first == 0 || o.first < s.first) {
		s.first = o.first
	}
	s.last = max(s.last, o.last)
}

// addBytes adds byte counts of which -1 is not known: the sum of the
// known ones, -1 when neither is.
func addBytes(sum, n int64) int64 {
	if n < 0 {
		return sum
	}
	return max(sum, 0) + n
}

// entry is a stats with its names, as Judge reads it.
type entry struct {
	sandbox, host string
	port          int
	decision      egresslog.Decision
	stats
}

// slot is one (sandbox, host, port, decision) key; its stats are kept
// apart (block), so that the chains a record walks to find its key lie
// in 16 bytes a key, not 64.
type slot struct {
	sandbox, host uint32
	next          int32 // the next slot of the same sandbox and host, as index+1; 0 ends the chain
	port          uint16
	decision      egresslog.Decision
}

// slotBlock is how many keys one block of a tally holds (56 KiB).
const slotBlock = 1024

type block struct {
	slots [slotBlock]slot
	stats [slotBlock]stats
}

// slots is a tally's keys, in blocks that never move: a slice that
// doubled as it grew copied every slot into fresh memory again, and on a
// virtual machine every fresh page is a fault that costs tens of
// microseconds (three in five of egress-usage's page faults at a million
// lines were that copy).
type slots struct {
	blocks []*block
	n      int
}

func (l *slots) at(i int32) *slot { return &l.blocks[i/slotBlock].slots[i%slotBlock] }

func (l *slots) stats(i int32) *stats { return &l.blocks[i/slotBlock].stats[i%slotBlock] }

// add appends s, with stats that count nothing yet, and returns its index.
func (l *slots) add(s slot) int32 {
	if l.n == len(l.blocks)*slotBlock {
		l.blocks = append(l.blocks, new(block))
	}
	i := int32(l.n)
	b := l.blocks[i/slotBlock]
	b.slots[i%slotBlock], b.stats[i%slotBlock] = s, stats{bytesOut: -1, bytesIn: -1}
	l.n++
	return i
}

// maxDense bounds the cells of the dense pair table (4 bytes each): past
// it (many sandboxes times many hosts) the pairs move to a map.
const maxDense = 1 << 20

// Tally counts records by sandbox, destination and decision. It is an
// egresslog.Sink: one per scanning worker, merged afterwards. Sandboxes
// and hosts are interned (few, so their maps stay in cache); a table with
// a row per sandbox and a column per host finds the first slot of a pair
// with two loads, where a map of 44,000 keys cost a cache miss a record;
// the few slots of a pair (its ports and decisions) are chained.
type Tally struct {
	hostIDs    map[string]uint32
	hosts      []string
	sandboxIDs map[string]uint32
	sandboxes  []string
	// rows[sandbox][host] is the pair's first slot, as index+1 (0: none);
	// nil once the table would pass maxDense cells, and pairs (key:
	// sandbox<<32 | host) takes over.
	rows     [][]int32
	cells    int
	maxCells int // maxDense; tests lower it
	pairs    map[uint64]int32
	keys     slots // one slot a key, in the order first seen
	// The last record's sandbox and host, as written and as ids, and its
	// slot: a run of records from one sandbox to one destination, as logs
	// have them, skips the interning and the table.
	lastSandbox, lastHost []byte
	lastSB, lastHostID    uint32
	lastSlot              int32 // -1: none
	scratch               []byte
	probe                 int64
	marked                int64 // records that carry an agent or user field at all
	folded                int64
	total                 int64
}

// NewTally makes an empty tally.
func NewTally() *Tally {
	return &Tally{hostIDs: map[string]uint32{}, sandboxIDs: map[string]uint32{}, rows: [][]int32{}, maxCells: maxDense, lastSlot: -1}
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

// maxIDs bounds the sandboxes and the hosts a tally names; past it,
// records are counted in Folded.
const maxIDs = 1<<23 - 1

// entry is key i with its names.
func (t *Tally) entry(i int32) entry {
	s := t.keys.at(i)
	return entry{sandbox: t.sandboxes[s.sandbox], host: t.hosts[s.host], port: int(s.port), decision: s.decision, stats: *t.keys.stats(i)}
}

// head returns where the table keeps the pair's first slot, or nil when
// the map keeps them.
func (t *Tally) head(sb, host uint32) *int32 {
	if t.rows != nil {
		for int(sb) >= len(t.rows) {
			t.rows = append(t.rows, nil)
		}
		row := t.rows[sb]
		if int(host) < len(row) {
			return &row[host]
		}
		if grow := len(t.hosts) - len(row); t.cells+grow <= t.maxCells {
			t.cells += grow
			row = append(row, make([]int32, grow)...)
			t.rows[sb] = row
			return &row[host]
		}
		// Too many cells: move every pair to the map.
		t.pairs = make(map[uint64]int32, t.keys.n)
		for s, row := range t.rows {
			for h, first := range row {
				if first != 0 {
					t.pairs[uint64(s)<<32|uint64(h)] = first
				}
			}
		}
		t.rows, t.cells = nil, 0
	}
	return nil // the map holds the pairs
}

// lookup returns the slot of a key, adding it; -1 when the tally is full.
func (t *Tally) lookup(sb, host uint32, port uint16, d egresslog.Decision) int32 {
	var first int32
	h := t.head(sb, host)
	if h != nil {
		first = *h
	} else {
		first = t.pairs[uint64(sb)<<32|uint64(host)]
	}
	for i := first; i != 0; i = t.keys.at(i - 1).next {
		if s := t.keys.at(i - 1); s.port == port && s.decision == d {
			return i - 1
		}
	}
	if t.keys.n >= maxKeys {
		return -1
	}
	i := t.keys.add(slot{sandbox: sb, host: host, port: port, decision: d, next: first}) + 1
	if h != nil {
		*h = i
	} else {
		t.pairs[uint64(sb)<<32|uint64(host)] = i
	}
	return i - 1
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
	port, d := uint16(r.Port), r.Decision&3
	var i int32
	switch {
	case t.lastSlot >= 0 && string(sb) == string(t.lastSandbox) && string(r.Host) == string(t.lastHost):
		if s := t.keys.at(t.lastSlot); s.port == port && s.decision == d {
			i = t.lastSlot
		} else {
			i = t.lookup(t.lastSB, t.lastHostID, port, d)
		}
	case len(t.hosts) >= maxIDs || len(t.sandboxes) >= maxIDs:
		t.folded++
		return
	default:
		t.scratch = appendHost(t.scratch[:0], r.Host)
		t.lastSB, t.lastHostID = intern(t.sandboxIDs, &t.sandboxes, sb), intern(t.hostIDs, &t.hosts, t.scratch)
		t.lastSandbox = append(t.lastSandbox[:0], sb...)
		t.lastHost = append(t.lastHost[:0], r.Host...)
		i = t.lookup(t.lastSB, t.lastHostID, port, d)
	}
	if i < 0 {
		t.folded++
		return
	}
	t.lastSlot = i
	s := t.keys.stats(i)
	s.count++
	s.bytesOut = addBytes(s.bytesOut, r.BytesOut)
	s.bytesIn = addBytes(s.bytesIn, r.BytesIn)
	if r.Time != 0 {
		if s.first == 0 || r.Time < s.first {
			s.first = r.Time
		}
		s.last = max(s.last, r.Time)
	}
}

// each calls fn for every entry.
func (t *Tally) each(fn func(e entry)) {
	for i := range int32(t.keys.n) {
		fn(t.entry(i))
	}
}

// Merge adds another tally's counts to t.
func (t *Tally) Merge(o *Tally) {
	t.probe += o.probe
	t.marked += o.marked
	t.folded += o.folded
	t.total += o.total
	// o's ids in t's numbering, interned once each.
	sbs := make([]uint32, len(o.sandboxes))
	for i, s := range o.sandboxes {
		sbs[i] = intern(t.sandboxIDs, &t.sandboxes, []byte(s))
	}
	hosts := make([]uint32, len(o.hosts))
	for i, h := range o.hosts {
		hosts[i] = intern(t.hostIDs, &t.hosts, []byte(h))
	}
	t.lastSlot = -1
	for j := range int32(o.keys.n) {
		s := o.keys.at(j)
		i := t.lookup(sbs[s.sandbox], hosts[s.host], s.port, s.decision)
		if i < 0 {
			t.folded += o.keys.stats(j).count
			continue
		}
		t.keys.stats(i).add(*o.keys.stats(j))
	}
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
