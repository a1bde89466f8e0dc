// Command fieldfloor is the egress-usage bench's floor: it reads a log on
// every core and finds the first ten space-separated fields of each line
// (internal/fields.Split, what the Squid reader starts each line with),
// and does nothing else: no number is parsed, no record made, nothing
// counted but lines. Any reader that must look at every field of every
// line, as egress-usage must, takes at least this long. It prints the
// lines and fields it found.
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/sandprobe/sandprobe/internal/fields"
)

// chunk is how much a worker takes at once; tail how far past it a
// worker reads to finish the line it began there.
const chunk, tail = 256 << 10, 64 << 10

func main() {
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fi, err := f.Stat()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	size := fi.Size()
	var next, lines, found atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1+chunk+tail)
			var sp [10]fields.Span
			var nl, nf int64
			for {
				off := next.Add(chunk) - chunk
				if off >= size {
					break
				}
				// From the byte before off: a line is this chunk's when it
				// starts in [off, off+chunk).
				from := max(off-1, 0)
				m, err := f.ReadAt(buf, from)
				if err != nil && err != io.EOF {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(3)
				}
				data, at := buf[:m], from
				if off > 0 {
					i := bytes.IndexByte(data, '\n')
					if i < 0 {
						continue
					}
					data, at = data[i+1:], at+int64(i)+1
				}
				for len(data) > 0 && at < off+chunk {
					line := data
					if i := bytes.IndexByte(data, '\n'); i >= 0 {
						line, data = data[:i], data[i+1:]
					} else {
						data = nil
					}
					at += int64(len(line)) + 1
					n, _ := fields.Split(line, sp[:])
					nl++
					nf += int64(n)
				}
			}
			lines.Add(nl)
			found.Add(nf)
		}()
	}
	wg.Wait()
	fmt.Println(lines.Load(), found.Load())
}
