// Package fields splits text records at spaces eight bytes at a time: the
// speed-up the record parsers (egresslog) share, kept here so that they
// read as plain field-by-field code. Split gives the same fields as taking
// space-separated fields one after another; FuzzSplit holds it to that.
package fields

import (
	"encoding/binary"
	"math/bits"
)

// Span is a field's place in its line: line[Start:End].
type Span struct{ Start, End int }

const (
	low7   = 0x7f7f7f7f7f7f7f7f
	high   = 0x8080808080808080
	spaces = 0x2020202020202020
)

// spaceBits has the high bit of each byte of w that is ' ' set, and no
// other bit (exact: no borrow runs from one byte into the next).
func spaceBits(w uint64) uint64 {
	x := w ^ spaces // a space is now a zero byte
	return ^((x & low7) + low7 | x) & high
}

// Split finds the first len(dst) fields of line, runs of bytes other than
// ' ', and returns how many it found and where the text after the last of
// them begins: past the one space that ends it, or len(line) when the
// line ends first.
func Split(line []byte, dst []Span) (n, rest int) {
	if len(dst) == 0 {
		return 0, 0
	}
	in, start := false, 0
	carry := uint64(0x80) // the line's start counts as a space before it
	i := 0
	for ; i+8 <= len(line); i += 8 {
		sp := spaceBits(binary.LittleEndian.Uint64(line[i:]))
		// A byte whose space-ness differs from the byte before it starts
		// a field (non-space) or ends one (space); they alternate.
		ev := (sp ^ (sp<<8 | carry)) & high
		carry = sp >> 56
		for ev != 0 {
			pos := i + bits.TrailingZeros64(ev)>>3
			ev &= ev - 1
			if !in {
				start, in = pos, true
				continue
			}
			dst[n] = Span{start, pos}
			n++
			in = false
			if n == len(dst) {
				return n, pos + 1
			}
		}
	}
	for ; i < len(line); i++ {
		if line[i] != ' ' {
			if !in {
				start, in = i, true
			}
			continue
		}
		if in {
			dst[n] = Span{start, i}
			n++
			in = false
			if n == len(dst) {
				return n, i + 1
			}
		}
	}
	if in {
		dst[n] = Span{start, len(line)}
		n++
	}
	return n, len(line)
}
