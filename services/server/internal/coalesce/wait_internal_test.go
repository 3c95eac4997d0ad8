package coalesce

import (
	"context"
	gosync "sync"
	"testing"
)

// TestBatcher_WaitWhileCallsCome: Wait may run while calls still arrive.
func TestBatcher_WaitWhileCallsCome(t *testing.T) {
	for range 500 {
		b := New(func([]int) {}, Options[int]{})
		var wg gosync.WaitGroup
		wg.Go(func() {
			for j := range 20 {
				_ = b.Do(context.Background(), j)
			}
		})
		wg.Go(func() {
			for range 20 {
				b.Wait()
			}
		})
		wg.Wait()
	}
}
