package docker

import (
	"cmp"
	"context"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// LabelDeadline carries the run's deadline on its probe container, so the
// next run can tell a leftover from a container another runner is still
// using.
const LabelDeadline = "sandprobe.dev/deadline"

// DefaultSweepAfter is how long past its deadline a probe container is left
// alone before a later run removes it (the kube backend waits as long).
const DefaultSweepAfter = time.Minute

// defaultDeadline is assumed for a probe container whose deadline label
// cannot be read (the default spec.probe.deadline).
const defaultDeadline = 2 * time.Minute

// Sweep removes the probe containers of earlier runs that are older than
// their deadline plus SweepAfter: a runner that was killed (SIGKILL, an OOM,
// a lost CI machine) never removed its container, and a stopped container
// keeps its writable layer and its name. Younger ones may belong to a
// runner still at work and are left alone. It returns how many it removed;
// an error means the engine could not even be listed.
func (b *Backend) Sweep(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := b.Client.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", LabelProbe),
	})
	if err != nil {
		return 0, fmt.Errorf("list probe containers: %w", err)
	}
	now := b.now()
	removed := 0
	for _, c := range list.Items {
		deadline, err := time.ParseDuration(c.Labels[LabelDeadline])
		if err != nil || deadline <= 0 {
			deadline = defaultDeadline
		}
		created := time.Unix(c.Created, 0)
		if !now.After(created.Add(deadline + cmp.Or(b.SweepAfter, DefaultSweepAfter))) {
			continue
		}
		b.log().Info("sweeping a probe container a killed runner left behind", "container", shortID(c.ID), "created", created, "deadline", deadline, "state", c.State)
		if _, err := b.Client.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			b.log().Warn("could not remove a leftover probe container; the next run will try again", "container", shortID(c.ID), "err", err)
			continue
		}
		removed++
	}
	return removed, nil
}

func (b *Backend) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}
