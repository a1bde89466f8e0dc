package docker

import "context"

// OOMEvent exposes oomEvent to the package's external tests.
func OOMEvent(b *Backend, ctx context.Context, id, startedAt string) bool {
	return b.oomEvent(ctx, id, startedAt)
}
