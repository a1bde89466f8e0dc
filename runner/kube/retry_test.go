package kube

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRetryTransient: a delete that meets a connection refused on loopback
// (a real dial) or a busy server is tried again until it is answered; an
// answer (not found, forbidden) is final at once; the context bounds it.
func TestRetryTransient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: a real connection refused
	_, refused := net.DialTimeout("tcp", addr, time.Second)
	if refused == nil {
		t.Skip("something listens on the closed port")
	}
	busy := apierrors.NewTooManyRequests("busy", 1)
	unavailable := apierrors.NewServiceUnavailable("apiserver restarting")
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("runner-scope"))
	cases := []struct {
		name      string
		errs      []error // what each attempt returns; nil after the list
		wantCalls int
		wantErr   error
	}{
		{"refused, then deleted", []error{refused, refused}, 3, nil},
		{"busy and restarting, then deleted", []error{busy, unavailable}, 3, nil},
		{"not found is an answer", []error{notFound}, 1, notFound},
		{"forbidden is an answer", []error{forbidden, nil}, 1, forbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := retryTransient(context.Background(), func() error {
				calls++
				if calls <= len(c.errs) {
					return c.errs[calls-1]
				}
				return nil
			})
			if calls != c.wantCalls || !errors.Is(err, c.wantErr) { // errors.Is(nil, nil) holds
				t.Errorf("%d calls, err %v; want %d calls, err %v", calls, err, c.wantCalls, c.wantErr)
			}
		})
	}
	t.Run("the context bounds it", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		calls := 0
		err := retryTransient(ctx, func() error { calls++; return refused })
		if err == nil || calls < 2 || time.Since(start) > 3*time.Second {
			t.Errorf("%d calls in %v, err %v: want a few tries, then the last error when the context ends", calls, time.Since(start), err)
		}
	})
}
