package main

import (
	"os"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// TestMain stops the shared API server (testenv.APIServer) the completion
// test starts.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopAPIServer()
	os.Exit(code)
}
