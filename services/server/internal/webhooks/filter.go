package webhooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/eventexpr"
)

// heldHit is a match of an event to a subscription with a filter, which
// the round inserts only if the filter is true for the event.
type heldHit struct {
	sub    uuid.UUID
	seq    int64
	filter string
}

// insertPassed evaluates the held hits' filters on their events and
// inserts the deliveries of those that pass, adding each subscription's
// lowest new seq to from. A filter that fails on an event (an error, the
// cost limit) or does not compile leaves that event undelivered, like a
// false one, and is counted and logged without the event's data: one
// tenant's expression never stops the round. Each event's data is decoded
// once for all its filters.
func (c *Consumer) insertPassed(ctx context.Context, tx pgx.Tx, events []sync.Event, held []heldHit, from map[uuid.UUID]int64) error {
	bySeq := make(map[int64]*sync.Event, len(events))
	for i := range events {
		bySeq[events[i].Seq] = &events[i]
	}
	inputs := map[int64]*eventexpr.Input{}
	var subs, ids []uuid.UUID
	var seqs []int64
	for _, h := range held {
		ev := bySeq[h.seq]
		if ev == nil {
			continue
		}
		in := inputs[h.seq]
		if in == nil {
			in = eventexpr.NewInput(ev)
			inputs[h.seq] = in
		}
		if !c.passes(ctx, h, in) {
			continue
		}
		subs, seqs, ids = append(subs, h.sub), append(seqs, h.seq), append(ids, ev.ID)
	}
	if len(subs) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, insertHeldSQL, subs, seqs, ids)
	if err != nil {
		return fmt.Errorf("webhooks: record filtered deliveries: %w", err)
	}
	var id uuid.UUID
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&id, &seq}, func() error {
		if cur, ok := from[id]; !ok || seq < cur {
			from[id] = seq
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("webhooks: record filtered deliveries: %w", err)
	}
	return nil
}

// passes says whether h's filter is true for its event; a failure is
// counted and logged and is not a pass.
func (c *Consumer) passes(ctx context.Context, h heldHit, in *eventexpr.Input) bool {
	prg, err := c.exprs.Program(h.sub, eventexpr.Filter, h.filter)
	if err == nil {
		var ok bool
		if ok, err = prg.Match(in); err == nil {
			return ok
		}
	}
	c.errs.Inc(eventexpr.Filter, err)
	c.logger.WarnContext(ctx, "webhook filter failed on an event; the event is not delivered",
		slog.String("subscription_id", h.sub.String()), slog.Int64("seq", h.seq), slog.String("error", err.Error()))
	return false
}

// ExpressionErrors counts the filters and transforms that failed on an
// event (bothy_webhook_filter_errors_total), by expression and reason:
// cost_limit (stopped by the cost limit), invalid (a stored expression
// that does not compile) or error (any other failure, such as a missing
// field or a value of the wrong type).
type ExpressionErrors struct {
	c *prometheus.CounterVec
}

// NewExpressionErrors registers the counter on reg.
func NewExpressionErrors(reg prometheus.Registerer) *ExpressionErrors {
	e := &ExpressionErrors{c: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bothy_webhook_filter_errors_total",
		Help: "Filters and transforms of webhook subscriptions that failed on an event, by expression (filter, transform) and reason (cost_limit, invalid, error).",
	}, []string{"expression", "reason"})}
	for _, k := range []eventexpr.Kind{eventexpr.Filter, eventexpr.Transform} {
		for _, r := range []string{"cost_limit", "invalid", "error"} {
			e.c.WithLabelValues(k.String(), r)
		}
	}
	reg.MustRegister(e.c)
	return e
}

// Inc counts one failure of an expression of kind; nil counts nothing.
func (e *ExpressionErrors) Inc(kind eventexpr.Kind, err error) {
	if e == nil {
		return
	}
	reason := "error"
	var ce *eventexpr.Error
	switch {
	case errors.Is(err, eventexpr.ErrCostLimit):
		reason = "cost_limit"
	case errors.As(err, &ce):
		reason = "invalid"
	}
	e.c.WithLabelValues(kind.String(), reason).Inc()
}

// filterOf returns the subscription's filter as a predicate on events: an
// event on which it fails is not kept, as in the round. Without a filter
// every event is kept.
func filterOf(ctx context.Context, tx pgx.Tx, id uuid.UUID) (func(*sync.Event) bool, error) {
	var src *string
	err := tx.QueryRow(ctx, `SELECT filter FROM webhook_subscriptions WHERE id = $1`, id).Scan(&src)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("read filter of %s: %w", id, err)
	}
	if src == nil {
		return func(*sync.Event) bool { return true }, nil
	}
	prg, err := eventexpr.Compile(eventexpr.Filter, *src)
	if err != nil {
		return func(*sync.Event) bool { return false }, nil
	}
	return func(ev *sync.Event) bool {
		ok, err := prg.Match(eventexpr.NewInput(ev))
		return err == nil && ok
	}, nil
}
