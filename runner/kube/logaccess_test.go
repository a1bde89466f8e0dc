package kube

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sourcegraph/conc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestPodLogGate: a wave of pods ending at once in a namespace whose logs
// the runner may not read costs one refused request, not one per pod; where
// it may, every pod reads its own log; an error that is not a refusal
// (a node out of reach) does not stop the next pod from trying.
func TestPodLogGate(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods/log"}, "p", nil)
	cases := []struct {
		name      string
		answer    error
		wantOpens int64
	}{
		{"refused: asked once", forbidden, 1},
		{"allowed: every pod reads", nil, 16},
		{"unreachable: every pod tries", apierrors.NewServiceUnavailable("no node address"), 16},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &run{}
			var opens atomic.Int64
			open := func() (io.ReadCloser, error) {
				opens.Add(1)
				time.Sleep(20 * time.Millisecond) // the wave's others arrive meanwhile
				if tc.answer != nil {
					return nil, tc.answer
				}
				return io.NopCloser(strings.NewReader("{}\n")), nil
			}
			var wg conc.WaitGroup
			var failed atomic.Int64
			for range 16 {
				wg.Go(func() {
					rc, err := r.podLog(context.Background(), "sandboxes", open)
					if err != nil {
						failed.Add(1)
						return
					}
					rc.Close()
				})
			}
			wg.Wait()
			if got := opens.Load(); got != tc.wantOpens {
				t.Errorf("%d log requests for 16 pods, want %d", got, tc.wantOpens)
			}
			if wantFailed := map[bool]int64{true: 0, false: 16}[tc.answer == nil]; failed.Load() != wantFailed {
				t.Errorf("%d pods without a log, want %d", failed.Load(), wantFailed)
			}
		})
	}
}
