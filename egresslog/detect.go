package egresslog

import (
	"bytes"
	"time"
)

// detectLines is how many non-empty lines Detect looks at.
const detectLines = 32

// Detect names the format most of the first lines of data are records
// of, or "" when none reads at least half of them.
func Detect(data []byte) Format {
	var lines [][]byte
	for len(data) > 0 && len(lines) < detectLines {
		i := bytes.IndexByte(data, '\n')
		var line []byte
		if i < 0 {
			line, data = data, nil
		} else {
			line, data = data[:i], data[i+1:]
		}
		line = bytes.TrimRight(line, "\r")
		if len(line) > 0 {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	best, bestN := Format(""), 0
	tp := tinyproxyEvents(time.Now(), time.UTC)
	for _, f := range Formats {
		n := 0
		ps := &parseState{ref: time.Now(), loc: time.UTC}
		for i, line := range lines {
			var ok bool
			var why string
			if f == FormatTinyproxy {
				_, ok, why = tp(line, int64(i+1))
			} else {
				r := Record{BytesOut: -1, BytesIn: -1}
				ok, why = parserFor(f)(line, &r, ps)
			}
			if ok || why == "" {
				n++
			}
		}
		if n > bestN {
			best, bestN = f, n
		}
	}
	if bestN*2 < len(lines) {
		return ""
	}
	if best == FormatSquidCommon && bytes.Count(lines[0], []byte{'"'}) >= 6 {
		best = FormatSquidCombined
	}
	return best
}
