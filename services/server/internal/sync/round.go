package sync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// RoundConfig configures a RoundRunner.
type RoundConfig struct {
	// BatchSize is the most events one round reads (consumer.batch_size).
	// Default 1000.
	BatchSize int
	// Logger is told about lost ranges that no handler took. Default: slog.Default().
	Logger *slog.Logger
}

// RoundRunner runs single rounds. It is safe for concurrent use; what keeps
// two rounds of one consumer apart is the cursor row lock, not this type.
type RoundRunner struct {
	db      TxBeginner
	cursors CursorStore
	events  EventSource
	jobs    JobSink
	cfg     RoundConfig
}

// NewRoundRunner wires a round from its ports.
func NewRoundRunner(db TxBeginner, cursors CursorStore, events EventSource, jobs JobSink, cfg *RoundConfig) *RoundRunner {
	c := RoundConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.BatchSize = cmp.Or(c.BatchSize, 1000)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &RoundRunner{db: db, cursors: cursors, events: events, jobs: jobs, cfg: c}
}

// RoundResult says what a round did.
type RoundResult struct {
	// Locked: another round held the cursor; nothing was done.
	Locked bool
	// Events and Jobs processed and inserted.
	Events, Jobs int
	// Lost is the range retention removed before it was read (Len 0: none).
	Lost SeqRange
	// From and To are the cursor before and after the round.
	From, To int64
	// Full: the round read a whole batch, so more may be waiting.
	Full bool
}

// Run runs one round of c (spec step 2): in one transaction, lock the
// cursor without waiting, report any range lost to retention, read up to
// BatchSize events after it, let the consumer create its jobs, insert them,
// advance the cursor and commit. Any error, a panic in the consumer, a
// cancelled context or a lost connection rolls everything back: no job
// exists without its cursor move and no cursor moves without its jobs.
func (r *RoundRunner) Run(ctx context.Context, c Consumer) (res RoundResult, err error) {
	name := c.Name()
	tx, err := r.db.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("round %q: begin: %w", name, err)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("round %q: %w: %v\n%s", name, ErrRoundPanicked, p, debug.Stack())
		}
		if err != nil {
			// The rollback must reach the server even when ctx is what failed.
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()

	cur, err := r.cursors.Lock(ctx, tx, name)
	if errors.Is(err, ErrCursorLocked) {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return RoundResult{Locked: true}, nil
	}
	if err != nil {
		return res, fmt.Errorf("round %q: lock cursor: %w", name, err)
	}
	res.From, res.To = cur.LastSeq, cur.LastSeq

	events, err := r.events.EventsAfter(ctx, tx, &EventsAfterParams{AfterSeq: cur.LastSeq, Limit: r.cfg.BatchSize})
	if err != nil {
		return res, fmt.Errorf("round %q: read events: %w", name, err)
	}
	// A gap below the first event read, or below the retention mark when
	// nothing is left, was removed by retention: the log has no other gaps.
	// Reading the events first holds the log's partitions, so no detach can
	// commit between that read and LowSeq.
	nextSeq := int64(0)
	if len(events) > 0 {
		nextSeq = events[0].Seq
	} else {
		if nextSeq, err = r.events.LowSeq(ctx, tx); err != nil {
			return res, fmt.Errorf("round %q: read retention mark: %w", name, err)
		}
	}
	if nextSeq > cur.LastSeq+1 {
		res.Lost = SeqRange{From: cur.LastSeq + 1, To: nextSeq - 1}
		if h, ok := c.(ConsumerLossHandler); ok {
			if err := h.HandleLost(ctx, tx, name, res.Lost); err != nil {
				return res, fmt.Errorf("round %q: handle lost %s: %w", name, res.Lost, err)
			}
		} else {
			r.cfg.Logger.WarnContext(ctx, "consumer lost events to retention",
				slog.String("consumer", name), slog.Int64("from", res.Lost.From), slog.Int64("to", res.Lost.To))
		}
		res.To = res.Lost.To
	}

	if len(events) > 0 {
		jobs, err := c.Handle(ctx, tx, events)
		if err != nil {
			return res, fmt.Errorf("round %q: handle %d events: %w", name, len(events), err)
		}
		if len(jobs) > 0 {
			if res.Jobs, err = r.jobs.InsertJobs(ctx, tx, jobs); err != nil {
				return res, fmt.Errorf("round %q: insert %d jobs: %w", name, len(jobs), err)
			}
		}
		res.Events = len(events)
		res.To = events[len(events)-1].Seq
		res.Full = len(events) == r.cfg.BatchSize
	}

	if err := r.cursors.Advance(ctx, tx, name, res.To); err != nil {
		return res, fmt.Errorf("round %q: advance cursor: %w", name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("round %q: commit: %w", name, err)
	}
	return res, nil
}
