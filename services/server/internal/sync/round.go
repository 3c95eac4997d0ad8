package sync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// RoundConfig configures a RoundRunner.
type RoundConfig struct {
	// BatchSize is the most events one round reads (consumer.batch_size).
	// Default 5000.
	BatchSize int
	// Budget bounds the work of one round of a ConsumerPrefixHandler.
	// Defaults: 1000 jobs, 50,000 receivers.
	Budget WorkBudget
	// Logger is told about lost ranges that no handler took. Default: slog.Default().
	Logger *slog.Logger
	// Tracer makes a span of every round that reads events, linked to the
	// spans that committed them. Default: a no-op provider (no tracing).
	Tracer trace.TracerProvider
}

// RoundRunner runs single rounds. It is safe for concurrent use; what keeps
// two rounds of one consumer apart is the cursor row lock, not this type.
type RoundRunner struct {
	db      TxBeginner
	cursors CursorStore
	events  EventSource
	jobs    JobSink
	cfg     RoundConfig
	tracer  trace.Tracer
}

// NewRoundRunner wires a round from its ports.
func NewRoundRunner(db TxBeginner, cursors CursorStore, events EventSource, jobs JobSink, cfg *RoundConfig) *RoundRunner {
	c := RoundConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.BatchSize = cmp.Or(c.BatchSize, 5000)
	c.Budget.Jobs = cmp.Or(c.Budget.Jobs, 1000)
	c.Budget.Receivers = cmp.Or(c.Budget.Receivers, 50_000)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Tracer == nil {
		c.Tracer = noop.NewTracerProvider()
	}
	return &RoundRunner{db: db, cursors: cursors, events: events, jobs: jobs, cfg: c,
		tracer: c.Tracer.Tracer("github.com/bothy/bothy/services/server/internal/sync")}
}

// RoundResult says what a round did.
type RoundResult struct {
	// Locked: another round held the cursor; nothing was done.
	Locked bool
	// Events and Jobs processed and inserted.
	Events, Jobs int
	// Read is how many events the round read; more than Events when a
	// ConsumerPrefixHandler covered only a prefix. It is set also when the
	// round fails after reading.
	Read int
	// Lost is the range retention removed before it was read (Len 0: none).
	Lost SeqRange
	// From and To are the cursor before and after the round.
	From, To int64
	// Full: more may be waiting, because the round read a whole batch or
	// its consumer covered fewer events than it read.
	Full bool
}

// Run runs one round of c (spec step 2): in one transaction, lock the
// cursor without waiting, report any range lost to retention, read up to
// BatchSize events after it, let the consumer create its jobs (for a
// leading part of them only, if it is a ConsumerPrefixHandler), insert
// them, advance the cursor past the events covered and commit. Any error, a panic in the consumer, a
// cancelled context or a lost connection rolls everything back: no job
// exists without its cursor move and no cursor moves without its jobs.
// What the consumer asked for with AfterCommit runs once the commit
// succeeded.
//
// A round that reads events is traced (RoundConfig.Tracer): its span links
// to the spans that committed them, and each job whose Args name its event
// (EventArgs) carries that event's trace context in its metadata.
func (r *RoundRunner) Run(ctx context.Context, c Consumer) (RoundResult, error) {
	return r.run(ctx, c, r.cfg.BatchSize)
}

// run is Run reading at most batch events; the worker shrinks batch after
// rounds that timed out.
func (r *RoundRunner) run(ctx context.Context, c Consumer, batch int) (res RoundResult, err error) {
	name := c.Name()
	start := time.Now()
	tx, err := r.db.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("round %q: begin: %w", name, err)
	}
	var span trace.Span // once events were read
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("round %q: %w: %v\n%s", name, ErrRoundPanicked, p, debug.Stack())
		}
		if err != nil {
			// The rollback must reach the server even when ctx is what failed.
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
		if span != nil {
			endSpan(span, &res, err)
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

	ctx, committed := withAfterCommit(ctx)
	events, err := r.readBatch(ctx, tx, c, name, batch, &res)
	if err != nil {
		return res, err
	}
	if len(events) > 0 {
		ctx, span = r.startSpan(ctx, name, start, events)
		if err := r.handle(ctx, tx, c, name, events, &res); err != nil {
			return res, err
		}
	}

	if err := r.cursors.Advance(ctx, tx, name, res.To); err != nil {
		return res, fmt.Errorf("round %q: advance cursor: %w", name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("round %q: commit: %w", name, err)
	}
	committed.run()
	return res, nil
}

// readBatch reads up to batch events after the cursor (res.From) and
// reports the range retention removed before them (reportLost).
func (r *RoundRunner) readBatch(ctx context.Context, tx pgx.Tx, c Consumer, name string, batch int, res *RoundResult) ([]Event, error) {
	events, err := r.events.EventsAfter(ctx, tx, &EventsAfterParams{AfterSeq: res.From, Limit: batch})
	if err != nil {
		return nil, fmt.Errorf("round %q: read events: %w", name, err)
	}
	res.Read = len(events)
	res.Full = len(events) == batch
	if err := r.reportLost(ctx, tx, c, name, events, res); err != nil {
		return nil, err
	}
	return events, nil
}

// reportLost reports the range retention removed between the cursor
// (res.From) and the events read, if any: to the consumer if it is a
// ConsumerLossHandler, in the same transaction, else to the log. It moves
// res.To past that range.
func (r *RoundRunner) reportLost(ctx context.Context, tx pgx.Tx, c Consumer, name string, events []Event, res *RoundResult) error {
	// A gap below the first event read, or below the retention mark when
	// nothing is left, was removed by retention: the log has no other gaps.
	// Reading the events first holds the log's partitions, so no detach can
	// commit between that read and LowSeq.
	nextSeq := int64(0)
	if len(events) > 0 {
		nextSeq = events[0].Seq
	} else {
		var err error
		if nextSeq, err = r.events.LowSeq(ctx, tx); err != nil {
			return fmt.Errorf("round %q: read retention mark: %w", name, err)
		}
	}
	if nextSeq <= res.From+1 {
		return nil
	}
	res.Lost = SeqRange{From: res.From + 1, To: nextSeq - 1}
	if h, ok := c.(ConsumerLossHandler); ok {
		if err := h.HandleLost(ctx, tx, name, res.Lost); err != nil {
			return fmt.Errorf("round %q: handle lost %s: %w", name, res.Lost, err)
		}
	} else {
		r.cfg.Logger.WarnContext(ctx, "consumer lost events to retention",
			slog.String("consumer", name), slog.Int64("from", res.Lost.From), slog.Int64("to", res.Lost.To))
	}
	res.To = res.Lost.To
	return nil
}

// handle lets the consumer create the jobs of the events read, or of a
// leading part of them (ConsumerPrefixHandler), carries each event's trace
// context to its jobs and inserts them in tx; res then covers the events
// handled.
func (r *RoundRunner) handle(ctx context.Context, tx pgx.Tx, c Consumer, name string, events []Event, res *RoundResult) error {
	jobs, n, err := r.consume(ctx, tx, c, events)
	if err != nil {
		return fmt.Errorf("round %q: handle %d events: %w", name, len(events), err)
	}
	events = events[:n]
	if err := carryTraceParents(jobs, events); err != nil {
		return fmt.Errorf("round %q: trace context of jobs: %w", name, err)
	}
	if len(jobs) > 0 {
		if res.Jobs, err = r.jobs.InsertJobs(ctx, tx, jobs); err != nil {
			return fmt.Errorf("round %q: insert %d jobs: %w", name, len(jobs), err)
		}
	}
	res.Events = len(events)
	res.To = events[len(events)-1].Seq
	res.Full = res.Full || n < res.Read
	return nil
}

// consume calls HandlePrefix with the round's budget if c has it, else
// Handle, and returns the jobs and how many leading events they cover.
func (r *RoundRunner) consume(ctx context.Context, tx pgx.Tx, c Consumer, events []Event) ([]Job, int, error) {
	p, ok := c.(ConsumerPrefixHandler)
	if !ok {
		jobs, err := c.Handle(ctx, tx, events)
		return jobs, len(events), err
	}
	jobs, n, err := p.HandlePrefix(ctx, tx, events, r.cfg.Budget)
	if err == nil && (n < 1 || n > len(events)) {
		err = fmt.Errorf("%w: covered %d of %d events", ErrBadPrefix, n, len(events))
	}
	return jobs, n, err
}

// maxRoundLinks bounds the links of a round's span: one per distinct
// producer span, and a batch may hold a thousand events.
const maxRoundLinks = 128

// startSpan starts the span of a round that read events, back-dated to the
// round's start (idle rounds, which read nothing, make no span), linked to
// the spans that committed the events: a round serves many producers, so
// it is a trace of its own rather than a child of one of them.
func (r *RoundRunner) startSpan(ctx context.Context, consumer string, start time.Time, events []Event) (context.Context, trace.Span) {
	var links []trace.Link
	seen := map[string]bool{}
	for i := range events {
		tp := events[i].TraceParent
		if tp == "" || seen[tp] || len(links) == maxRoundLinks {
			continue
		}
		seen[tp] = true
		if sc, ok := ParseTraceParent(tp); ok {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.Int64("bothy.event.seq", events[i].Seq)}})
		}
	}
	return r.tracer.Start(ctx, "bothy.round", trace.WithNewRoot(), trace.WithTimestamp(start), trace.WithLinks(links...),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("bothy.consumer", consumer), attribute.Int("bothy.round.events", len(events)),
			attribute.Int64("bothy.round.first_seq", events[0].Seq), attribute.Int64("bothy.round.last_seq", events[len(events)-1].Seq)))
}

func endSpan(span trace.Span, res *RoundResult, err error) {
	span.SetAttributes(attribute.Int("bothy.round.jobs", res.Jobs))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "round rolled back")
	}
	span.End()
}
