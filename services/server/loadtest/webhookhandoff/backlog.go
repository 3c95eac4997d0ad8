package webhookhandoff

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// backlogBatch is how many events one producer transaction appends to the
// backlog.
const backlogBatch = 1000

// runBacklog appends the backlog, then starts one worker and measures it
// until every delivery has arrived.
func (h *handoff) runBacklog(ctx context.Context) error {
	want, err := h.writeBacklog(ctx)
	if err != nil {
		return fmt.Errorf("backlog: %w", err)
	}
	if err := h.rcv.expect(ctx, want); err != nil {
		return err
	}
	c, err := h.startCosts(ctx)
	if err != nil {
		return err
	}
	defer c.close(ctx)
	r := &result{loadBefore: harness.LoadAvg()}
	w, err := h.startWorker(ctx, c)
	if err != nil {
		return err
	}
	defer w.Stop()
	stats, awaitErr := h.rcv.await(ctx, h.opts.drain, w.Done)
	if awaitErr != nil {
		fmt.Fprintf(h.stdout, "drain: %v\n", awaitErr)
	}
	if err := c.meter.Mark(ctx); err != nil {
		return err
	}
	totals, err := c.finish(ctx, w)
	if err != nil {
		return err
	}
	r.loadAfter = harness.LoadAvg()
	r.fromStats(stats)
	r.events, r.expected = want.Upto-want.After, sum(want.Counts)
	r.cost = totals.PerDelivery(stats.Received)
	r.tripKinds = totals.RoundTripKinds
	if r.statements, err = h.topStatements(ctx, c); err != nil {
		return err
	}
	return h.reportBacklog(r)
}

// writeBacklog appends --backlog events for each target in transactions
// of backlogBatch events, event i to target i mod targets, and returns
// what the receiver should expect: --backlog deliveries for every
// subscription, of the seqs appended.
func (h *handoff) writeBacklog(ctx context.Context) (*expectation, error) {
	pool := h.scratch.Pool
	log := postgres.NewEventLog(pool, &postgres.EventLogConfig{Notify: postgres.NotifyNone})
	defer log.Close()
	before, err := postgres.Head(ctx, pool)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	total := h.opts.backlog * len(h.targets)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(2)
	for from := 0; from < total; from += backlogBatch {
		g.Go(func() error { return h.appendBatch(gctx, log, from, min(from+backlogBatch, total)) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	after, err := postgres.Head(ctx, pool)
	if err != nil {
		return nil, err
	}
	if int(after-before) != total {
		return nil, fmt.Errorf("appended %d events, the log grew by %d", total, after-before)
	}
	fmt.Fprintf(h.stdout, "backlog: %d events appended in %s (%d per transaction), no worker running\n",
		total, time.Since(began).Round(100*time.Millisecond), backlogBatch)
	counts := make([]int, len(h.subs))
	for k := range counts {
		counts[k] = h.opts.backlog
	}
	return &expectation{After: before, Upto: after, Counts: counts}, nil
}

// appendBatch appends events from..to-1 in one producer transaction.
func (h *handoff) appendBatch(ctx context.Context, log *postgres.EventLog, from, to int) error {
	news := make([]sync.NewEvent, 0, to-from)
	for i := from; i < to; i++ {
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		t := &h.targets[i%len(h.targets)]
		news = append(news, sync.NewEvent{ID: id, Space: t.space, Type: t.typ, Actor: "perf-writer", Data: []byte(`{"n":1}`)})
	}
	_, err := log.Append(ctx, news)
	return err
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
