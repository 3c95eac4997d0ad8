package httpapi

import (
	"context"
	gosync "sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatedBarrier is a barrier whose flushes each wait for a release and
// count themselves.
type gatedBarrier struct {
	mu      gosync.Mutex
	calls   int
	started chan int
	release chan struct{}
}

func (g *gatedBarrier) Durable(ctx context.Context) error {
	g.mu.Lock()
	g.calls++
	n := g.calls
	g.mu.Unlock()
	g.started <- n
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestSharedBarrier_ACallWaitsForAFlushThatBeganAfterIt: calls made while
// a flush runs share the next one, and none of them returns with the
// flush that was already running when it was made.
func TestSharedBarrier_ACallWaitsForAFlushThatBeganAfterIt(t *testing.T) {
	t.Parallel()
	g := &gatedBarrier{started: make(chan int, 10), release: make(chan struct{})}
	s := newSharedBarrier(g)
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- s.Durable(ctx) }()
	require.Equal(t, 1, <-g.started)

	const later = 20
	returned := make(chan error, later)
	for range later {
		go func() { returned <- s.Durable(ctx) }()
	}
	// Let them all queue up behind the running flush.
	require.Eventually(t, func() bool { return s.flushes.Waiting() == later }, 10*time.Second, time.Millisecond)
	g.release <- struct{}{} // flush 1 ends
	require.NoError(t, <-first)
	require.Equal(t, 2, <-g.started, "the later calls share one flush")
	select {
	case <-returned:
		t.Fatal("a call returned with a flush that began before it")
	default:
	}
	g.release <- struct{}{} // flush 2 ends
	for range later {
		require.NoError(t, <-returned)
	}
	g.mu.Lock()
	require.Equal(t, 2, g.calls)
	g.mu.Unlock()
}
