package testenv

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that a child process (its Stdout and Stderr)
// writes while the test reads it: a daemon's log, shown when a test fails.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
