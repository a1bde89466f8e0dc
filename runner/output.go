package runner

import "bytes"

// LimitedBuffer keeps at most Max bytes of a probe's output and remembers
// that it overflowed: a probe that prints without end must not exhaust the
// runner's memory, and a cut result must never parse as a whole one.
type LimitedBuffer struct {
	bytes.Buffer
	Max      int
	Overflow bool
}

func (l *LimitedBuffer) Write(p []byte) (int, error) {
	room := l.Max - l.Len()
	if len(p) > room {
		l.Overflow = true
		if room > 0 {
			l.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return l.Buffer.Write(p)
}
