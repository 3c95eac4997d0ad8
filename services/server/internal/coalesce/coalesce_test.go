package coalesce_test

import (
	"context"
	gosync "sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/coalesce"
)

// gate is a run function that records its batches and holds each until
// released.
type gate struct {
	mu      gosync.Mutex
	batches [][]int
	started chan int
	release chan struct{}
}

func newGate() *gate { return &gate{started: make(chan int, 100), release: make(chan struct{}, 100)} }

func (g *gate) run(batch []int) {
	g.mu.Lock()
	g.batches = append(g.batches, batch)
	g.mu.Unlock()
	g.started <- len(batch)
	<-g.release
}

func (g *gate) seen() [][]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]int(nil), g.batches...)
}

// doAll calls Do for each value on a goroutine of its own.
func doAll(b *coalesce.Batcher[int], vs []int) *gosync.WaitGroup {
	var wg gosync.WaitGroup
	for _, v := range vs {
		wg.Go(func() { _ = b.Do(context.Background(), v) })
	}
	return &wg
}

// TestBatcher_CallsThatArriveMeanwhileShareTheNextBatch: while one batch
// runs, every call that comes waits, and the next batch takes them all.
func TestBatcher_CallsThatArriveMeanwhileShareTheNextBatch(t *testing.T) {
	g := newGate()
	b := coalesce.New(g.run, coalesce.Options[int]{})
	first := doAll(b, []int{1})
	require.Equal(t, 1, <-g.started)
	rest := doAll(b, []int{2, 3, 4, 5})
	requireQueued(t, b, 4)
	g.release <- struct{}{}
	require.Equal(t, 4, <-g.started)
	g.release <- struct{}{}
	first.Wait()
	rest.Wait()
	b.Wait()
	require.Len(t, g.seen(), 2)
	require.ElementsMatch(t, []int{2, 3, 4, 5}, g.seen()[1])
}

// TestBatcher_MaxWeightSplitsBatches: a batch takes calls in order up to
// MaxWeight, and always at least one.
func TestBatcher_MaxWeightSplitsBatches(t *testing.T) {
	g := newGate()
	b := coalesce.New(g.run, coalesce.Options[int]{MaxWeight: 5, Weight: func(v int) int { return v }})
	first := doAll(b, []int{9})
	require.Equal(t, 1, <-g.started)
	var rest gosync.WaitGroup
	for i, v := range []int{2, 3, 4, 7} {
		rest.Go(func() { _ = b.Do(context.Background(), v) })
		requireQueued(t, b, i+1)
	}
	for range 4 {
		g.release <- struct{}{}
	}
	first.Wait()
	rest.Wait()
	b.Wait()
	require.Len(t, g.seen(), 4) // {9}, {2 3}, {4}, {7}
	for _, batch := range g.seen()[1:] {
		sum := 0
		for _, v := range batch {
			sum += v
		}
		require.True(t, len(batch) == 1 || sum <= 5, "batch %v over the weight", batch)
	}
}

// TestBatcher_AContextThatEndsBeforeABatchTookTheCallWithdrawsIt: the
// call never runs and its error says so; one that ends after a batch took
// the call says the outcome is unknown, and the batch goes on.
func TestBatcher_AContextThatEndsBeforeABatchTookTheCallWithdrawsIt(t *testing.T) {
	g := newGate()
	b := coalesce.New(g.run, coalesce.Options[int]{})
	first := doAll(b, []int{1})
	require.Equal(t, 1, <-g.started)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.Do(ctx, 2) }()
	requireQueued(t, b, 1)
	cancel()
	err := <-errc
	require.ErrorIs(t, err, coalesce.ErrNotTaken)
	require.ErrorIs(t, err, context.Canceled)

	ctx, cancel = context.WithCancel(context.Background())
	go func() { errc <- b.Do(ctx, 3) }()
	requireQueued(t, b, 1)
	g.release <- struct{}{}
	require.Equal(t, 1, <-g.started) // the batch of 3 runs
	cancel()
	err = <-errc
	require.ErrorIs(t, err, coalesce.ErrOutcomeUnknown)
	g.release <- struct{}{}
	first.Wait()
	b.Wait()
	require.Equal(t, [][]int{{1}, {3}}, g.seen())
}

// TestBatcher_AStalledBatchLetsAnotherStart: with two runners, a call
// that waits longer than Stall behind a batch starts a second one.
func TestBatcher_AStalledBatchLetsAnotherStart(t *testing.T) {
	g := newGate()
	b := coalesce.New(g.run, coalesce.Options[int]{Runners: 2, Stall: 10 * time.Millisecond})
	first := doAll(b, []int{1})
	require.Equal(t, 1, <-g.started)
	second := doAll(b, []int{2})
	select {
	case n := <-g.started: // the first batch is held, so only a second runner can start this one
		require.Equal(t, 1, n)
	case <-time.After(10 * time.Second):
		t.Fatal("no second batch started while the first was held")
	}
	g.release <- struct{}{}
	g.release <- struct{}{}
	first.Wait()
	second.Wait()
	b.Wait()
}

// TestBatcher_OneRunnerNeverRunsTwoBatchesAtOnce.
func TestBatcher_OneRunnerNeverRunsTwoBatchesAtOnce(t *testing.T) {
	var mu gosync.Mutex
	running, most := 0, 0
	b := coalesce.New(func([]int) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
	}, coalesce.Options[int]{Stall: time.Nanosecond})
	var wg gosync.WaitGroup
	for i := range 200 {
		wg.Go(func() { require.NoError(t, b.Do(context.Background(), i)) })
	}
	wg.Wait()
	b.Wait()
	require.Equal(t, 1, most)
}

// requireQueued waits until n calls wait for a batch.
func requireQueued(t *testing.T, b *coalesce.Batcher[int], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(queuedOf(b)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", len(queuedOf(b)), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func queuedOf(b *coalesce.Batcher[int]) []int { return coalesce.Queued(b) }

// TestBatcher_OneRunnerLingersAndTheCallsMeanwhileJoinIt: with a linger,
// calls that come while one runner lingers join its batch instead of
// starting runners of their own, up to Runners.
func TestBatcher_OneRunnerLingersAndTheCallsMeanwhileJoinIt(t *testing.T) {
	var mu gosync.Mutex
	var sizes []int
	done := make(chan struct{}, 100)
	b := coalesce.New(func(batch []int) {
		mu.Lock()
		sizes = append(sizes, len(batch))
		mu.Unlock()
		for range batch {
			done <- struct{}{}
		}
	}, coalesce.Options[int]{Runners: 2, Linger: time.Second})
	for i := range 10 {
		b.Add(i)
	}
	for range 10 {
		<-done
	}
	b.Wait()
	require.Equal(t, []int{10}, sizes)
}
