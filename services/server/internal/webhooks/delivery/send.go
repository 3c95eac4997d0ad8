package delivery

import (
	"context"
	gosync "sync"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sleep"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// batch is what one step claimed: the requests to make, in order, and
// what they need; send fills in their outcomes.
type batch struct {
	target   outbound.Target
	requests []*request
	// ordered: one request at a time, in order, stopping at the first
	// that fails; otherwise up to inFlight at once.
	ordered  bool
	inFlight int
	// rights is the owner's right to receive the batch's events, decided
	// at decidedAt; it is decided again once it is older than the
	// configured bound.
	rights    authz.Request
	decidedAt time.Time
	// until is when the lease ends: no request starts that could outlive it.
	until time.Time
	// every is the throttle's spacing (0: none) and next its next slot.
	every time.Duration
	next  time.Time
	// throttled: the throttle's next slot after this batch (nil: no throttle).
	throttled *time.Time
	// drained: the claim took every pending delivery there was.
	drained bool
	// eager: the recorder may record its 2xx answers before its next step
	// (recorder): the subscription is active and not marked failing, so
	// a 2xx changes nothing but its delivery.
	eager bool
}

// allDelivered says whether every request of b was sent and answered 2xx.
func (b *batch) allDelivered() bool {
	for _, r := range b.requests {
		if !r.sent || r.Kind != outbound.Delivered {
			return false
		}
	}
	return true
}

// request is one request of a batch: the deliveries it carries (one, or
// up to max_batch consecutive ones), its message and, once sent, its
// outcome.
type request struct {
	items []*delivery
	msg   outbound.Message
	// shapeErr: the subscription's transform failed on the request's
	// events, so it fails without being sent.
	shapeErr error
	probe    bool
	sent     bool
	started  time.Time
	outbound.Answer
	// rec: where its 2xx answer stands with the process's recorder.
	rec recState
}

// delivery is one claimed delivery and its event.
type delivery struct {
	seq          int64
	eventID      uuid.UUID
	attempts     int
	firstAttempt *time.Time
	nextAt       *time.Time
	// resentAt is when the owner last resent it (nil: never).
	resentAt *time.Time
	ev       *sync.Event
}

// head is the request's first delivery.
func (r *request) head() *delivery { return r.items[0] }

// send makes the batch's requests: in order, one at a time, for the
// ordered policies; up to inFlight at once otherwise. A request starts only
// while the rights decision is fresh (it is taken again when it is older
// than RightsMaxAge, and a refusal stops the batch), while the lease
// outlives it, and not before the throttle's slot. Requests not started are
// left pending for the next batch.
func (s *sender) send(ctx context.Context, b *batch) {
	g := &gate{s: s, b: b}
	if b.ordered || b.inFlight <= 1 {
		for _, r := range b.requests {
			if !g.admit(ctx) {
				break
			}
			s.attempt(ctx, b, r)
			if r.Kind != outbound.Delivered && b.ordered {
				break
			}
		}
	} else {
		// A request is admitted once a slot is free, so that it starts
		// right after the gate let it, not after another request ended.
		slots := make(chan struct{}, b.inFlight)
		var wg gosync.WaitGroup
		for _, r := range b.requests {
			slots <- struct{}{}
			if !g.admit(ctx) {
				break
			}
			wg.Go(func() {
				defer func() { <-slots }()
				s.attempt(ctx, b, r)
			})
		}
		wg.Wait()
	}
	if b.every > 0 {
		b.throttled = &b.next
	}
}

// attempt sends one message of b to the subscription's destination and
// records its answer in r.
func (s *sender) attempt(ctx context.Context, b *batch, r *request) {
	r.sent, r.started = true, time.Now()
	ctx, span := startAttempt(ctx, s.subID, b.target.Kind, r)
	defer func() { endAttempt(span, &r.Answer) }()
	if r.shapeErr != nil {
		r.Kind, r.Err = outbound.Retry, "not sent: "+r.shapeErr.Error()
		s.d.metrics.expressionError(r.shapeErr)
		return
	}
	dest, err := s.d.dests.For(&b.target)
	if err != nil {
		r.Kind, r.Err = outbound.Retry, err.Error()
		return
	}
	r.Answer = dest.Send(ctx, &r.msg, r.started)
	s.d.metrics.attempt(b.target.Kind, r.Duration)
	if b.eager && r.Kind == outbound.Delivered {
		s.d.rec.add(s.subID, r)
	}
}

// gate decides, request by request, whether the next one may start. It is
// called by one goroutine at a time.
type gate struct {
	s       *sender
	b       *batch
	refused bool
}

// admit waits for the throttle's slot and says whether the next request
// may start: within the job's slice, the lease must outlive it, and the
// rights decision must be fresh (it is taken again, outside any
// transaction, when it is not).
func (g *gate) admit(ctx context.Context) bool {
	b, cfg := g.b, &g.s.d.cfg
	if g.refused || ctx.Err() != nil || g.s.sliceLeft() <= 0 {
		return false // past the slice, the job yields: River's timeout for it allows one more request
	}
	if b.every > 0 {
		now := time.Now()
		slot := later(b.next, now)
		if slot.Add(cfg.Timeout).After(b.until) || slot.Sub(now) >= g.s.sliceLeft() {
			return false
		}
		if sleep.For(ctx, slot.Sub(now)) != nil {
			return false
		}
		b.next = slot.Add(b.every)
	}
	if time.Now().Add(cfg.Timeout).After(b.until) {
		return false
	}
	if time.Since(b.decidedAt) > cfg.RightsMaxAge {
		at := time.Now()
		dec, err := authz.Allowed(ctx, g.s.d.pool, &b.rights)
		if err != nil || !dec.Allowed {
			g.refused = true // the next step decides again and refuses with the reason
			return false
		}
		b.decidedAt = at
	}
	return true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
