package sync

import (
	"context"
	gosync "sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatedBarrier is a barrier whose flushes each wait for a release and
// count themselves. A flush whose context ends returns its error.
type gatedBarrier struct {
	mu      gosync.Mutex
	calls   int
	started chan int
	release chan struct{}
}

func newGatedBarrier() *gatedBarrier {
	return &gatedBarrier{started: make(chan int, 10), release: make(chan struct{})}
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

func (g *gatedBarrier) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// waiting reports how many calls wait for the next flush.
func (s *SharedBarrier) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == nil {
		return 0
	}
	return s.next.waiters
}

// idle reports whether no flush runs or waits to.
func (s *SharedBarrier) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.running
}

// TestSharedBarrier_ACallWaitsForAFlushThatBeganAfterIt: calls made while
// a flush runs share the next one, and none of them returns with the
// flush that was already running when it was made.
func TestSharedBarrier_ACallWaitsForAFlushThatBeganAfterIt(t *testing.T) {
	t.Parallel()
	g := newGatedBarrier()
	s := NewSharedBarrier(g, nil)
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
	require.Eventually(t, func() bool { return s.waiting() == later }, 10*time.Second, time.Millisecond)
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
	require.Equal(t, 2, g.count())
}

// TestSharedBarrier_FlushEndsWhenNobodyWaits: a flush runs on no caller's
// context; once every caller waiting for it has given up, it is cancelled
// if it runs and never started if it does not yet.
func TestSharedBarrier_FlushEndsWhenNobodyWaits(t *testing.T) {
	t.Parallel()

	t.Run("RunningFlushIsCancelled", func(t *testing.T) {
		t.Parallel()
		g := newGatedBarrier()
		s := NewSharedBarrier(g, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Durable(ctx) }()
		require.Equal(t, 1, <-g.started)
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		// The flush, never released, ends by its cancelled context.
		require.Eventually(t, s.idle, 10*time.Second, time.Millisecond)
		require.Equal(t, 1, g.count())
	})

	t.Run("PendingFlushIsDropped", func(t *testing.T) {
		t.Parallel()
		g := newGatedBarrier()
		s := NewSharedBarrier(g, nil)
		first := make(chan error, 1)
		go func() { first <- s.Durable(context.Background()) }()
		require.Equal(t, 1, <-g.started)
		ctx, cancel := context.WithCancel(context.Background())
		later := make(chan error, 1)
		go func() { later <- s.Durable(ctx) }()
		require.Eventually(t, func() bool { return s.waiting() == 1 }, 10*time.Second, time.Millisecond)
		cancel()
		require.ErrorIs(t, <-later, context.Canceled)
		g.release <- struct{}{} // flush 1 ends
		require.NoError(t, <-first)
		require.Eventually(t, s.idle, 10*time.Second, time.Millisecond)
		require.Equal(t, 1, g.count(), "a flush ran that nobody waited for")
	})

	t.Run("LeavingCancelsOnlyTheFlushItWaitsFor", func(t *testing.T) {
		t.Parallel()
		g := newGatedBarrier()
		s := NewSharedBarrier(g, nil)
		ctx, cancel := context.WithCancel(context.Background())
		leaving := make(chan error, 1)
		go func() { leaving <- s.Durable(ctx) }()
		require.Equal(t, 1, <-g.started)
		// A second caller cannot join the running flush: it waits for the
		// next, so the first one's leaving cancels flush 1 ...
		staying := make(chan error, 1)
		go func() { staying <- s.Durable(context.Background()) }()
		require.Eventually(t, func() bool { return s.waiting() == 1 }, 10*time.Second, time.Millisecond)
		cancel()
		require.ErrorIs(t, <-leaving, context.Canceled)
		// ... and flush 2 runs for the one that stayed.
		require.Equal(t, 2, <-g.started)
		g.release <- struct{}{}
		require.NoError(t, <-staying)
	})
}

// TestSharedBarrier_TimeoutEndsAFlush: with a timeout, a flush that does
// not end by then fails every caller with its context's error.
func TestSharedBarrier_TimeoutEndsAFlush(t *testing.T) {
	t.Parallel()
	g := newGatedBarrier()
	s := NewSharedBarrier(g, &SharedBarrierConfig{Timeout: 10 * time.Millisecond})
	require.ErrorIs(t, s.Durable(context.Background()), context.DeadlineExceeded)
}
