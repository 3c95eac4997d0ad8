package webhookhandoff

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// runHandoff starts the worker, warms it up, appends events at the rate
// for the duration and measures each delivery's hand-off.
func (h *handoff) runHandoff(ctx context.Context) error {
	o := h.opts
	c, err := h.startCosts(ctx)
	if err != nil {
		return err
	}
	defer c.close(ctx)
	w, err := h.startWorker(ctx, c)
	if err != nil {
		return err
	}
	defer w.Stop()
	// Warm-up: connections, River's producer and the listener settle.
	if _, _, err := h.phase(ctx, time.Second, min(o.Rate, 200), 30*time.Second, w.Done); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	r := &result{loadBefore: harness.LoadAvg()}
	began := time.Now()
	res, stats, err := h.phase(ctx, o.Duration, o.Rate, o.drain, w.Done)
	if res == nil {
		return fmt.Errorf("load: %w", err)
	}
	r.wall, r.appending = time.Since(began), time.Duration(res.Seconds*float64(time.Second))
	if err := c.meter.Mark(ctx); err != nil {
		return err
	}
	totals, err := c.finish(ctx, w)
	if err != nil {
		return err
	}
	r.loadAfter = harness.LoadAvg()
	r.fromStats(stats)
	r.cost = totals.PerDelivery(stats.Received)
	r.tripKinds, r.producerCPU = totals.RoundTripKinds, res.cpu
	if r.statements, err = h.topStatements(ctx, c); err != nil {
		return err
	}
	if err := h.collect(ctx, r, res); err != nil {
		return fmt.Errorf("collect: %w", err)
	}
	return h.report(r, h.scratch.Cfg.Perf.WebhookHandoffP95)
}

// phaseResult is what one phase's producer appended and what it cost.
type phaseResult struct {
	producerResult
	cpu time.Duration
}

// phase appends events at rate for d in a producer process and waits, at
// most within after the producer ended, until their deliveries arrived.
// It returns nil only when the producer failed; what did not arrive is in
// the counts, with the error.
func (h *handoff) phase(ctx context.Context, d time.Duration, rate float64, within time.Duration, done <-chan error) (*phaseResult, *receiverStats, error) {
	targets := make([][2]string, len(h.targets))
	for i, t := range h.targets {
		targets[i] = [2]string{t.space, t.typ}
	}
	res, cpu, err := produce(ctx, &producerParams{URL: h.scratch.URL, Rate: rate, Duration: d,
		Producers: h.opts.Producers, Targets: targets})
	if err != nil {
		return nil, nil, err
	}
	want := &expectation{After: res.FirstSeq - 1, Upto: res.LastSeq, Counts: make([]int, len(h.subs))}
	for t, n := range res.PerTarget {
		for _, k := range h.targets[t].subs {
			want.Counts[k] = n
		}
	}
	if err := h.rcv.expect(ctx, want); err != nil {
		return nil, nil, err
	}
	stats, err := h.rcv.await(ctx, within, done)
	return &phaseResult{producerResult: *res, cpu: cpu}, stats, err
}

// eventRow is one event of the measured phase.
type eventRow struct {
	id        uuid.UUID
	committed time.Time
}
