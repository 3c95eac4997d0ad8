package harness

import (
	"context"
	"fmt"
	"time"
)

// Await polls missing every 20 ms until it returns 0, at most within. It
// returns an error saying how many were still missing, ctx's error, or
// that the worker stopped (done received).
func Await(ctx context.Context, within time.Duration, done <-chan error, missing func() int) error {
	deadline := time.Now().Add(within)
	for {
		n := missing()
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d still missing after %s", n, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-done:
			return fmt.Errorf("worker stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
