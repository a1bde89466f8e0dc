package fields

import (
	"bytes"
	"fmt"
	"testing"
)

// naive takes fields one after another, as a parser without Split does.
func naive(line []byte, max int) ([]Span, int) {
	var out []Span
	i := 0
	for len(out) < max {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		if i == len(line) {
			return out, len(line)
		}
		j := bytes.IndexByte(line[i:], ' ')
		if j < 0 {
			out = append(out, Span{i, len(line)})
			return out, len(line)
		}
		out = append(out, Span{i, i + j})
		i += j + 1
	}
	return out, i
}

func check(t *testing.T, line []byte, max int) {
	t.Helper()
	dst := make([]Span, max)
	n, rest := Split(line, dst)
	want, wantRest := naive(line, max)
	if n != len(want) || rest != wantRest || fmt.Sprint(dst[:n]) != fmt.Sprint(want) {
		t.Fatalf("Split(%q, %d) = %v rest %d; want %v rest %d", line, max, dst[:n], rest, want, wantRest)
	}
}

func TestSplit(t *testing.T) {
	for _, line := range []string{
		"", " ", "a", " a", "a ", "  a  b  ", "abcdefgh", "abcdefg h", "abcdefgh ijklmnop",
		"1793491200.000   1236 10.244.0.63 TCP_TUNNEL/200 451920 CONNECT host12.example.net:443 - HIER_DIRECT/203.0.113.113 - 863 \"sandprobe/1.0 nonce=bench\"",
		"        x", "x        ", "\t\x00\xa0 !\x01 ~\x7f\xff",
	} {
		for max := 0; max <= 14; max++ {
			check(t, []byte(line), max)
		}
	}
}

func FuzzSplit(f *testing.F) {
	f.Add([]byte("1793491200.000   1236 10.244.0.63 TCP_TUNNEL/200 451920 CONNECT h:443 - HIER_DIRECT/x - 863 \"a b\""), 10)
	f.Add([]byte("  \x20\xa0!  "), 3)
	f.Fuzz(func(t *testing.T, line []byte, max int) {
		if max < 0 || max > 64 {
			return
		}
		check(t, line, max)
	})
}
