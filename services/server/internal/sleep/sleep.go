// Package sleep waits for a duration unless a context ends first: the one
// wait the worker loop, the partition maintenance and the webhook senders'
// throttle share.
package sleep

import (
	"context"
	"time"
)

// For waits d and returns nil, or returns ctx's error as soon as ctx ends.
// A d of zero or less does not wait: it returns ctx's error, if any.
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
