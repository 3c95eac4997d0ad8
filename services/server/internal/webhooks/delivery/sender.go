package delivery

import (
	"context"
	gosync "sync"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sleep"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// holder is who holds a subscription's lease: the job, and the process
// running it ("" if that process takes no part in liveness).
type holder struct {
	jobID int64
	owner string
}

// sender is one job's run as the sender of a subscription.
type sender struct {
	d     *Deliverer
	subID uuid.UUID
	me    holder
	// start is when the job started; sliceStart when its slice did: at
	// the start, and again whenever the sender resumed after catching up
	// while the process had a sender slot to spare (resume).
	start, sliceStart time.Time
	// runFor is how long this job runs: MaxRun less up to a quarter, so
	// that senders started together do not all yield together.
	runFor time.Duration
	// wake receives the subscription's wake-ups while the job runs; each
	// step drains it first, so one that arrives during or after a step's
	// claim is kept for the linger that may follow.
	wake chan struct{}
	// alone: the subscription's last step found it unfit for a group
	// (steps), so the next one runs alone without trying.
	alone bool
	// idled: the sender has found nothing to send at least once in this
	// job, so its steps after a wake-up are a trickle's, which may run in a
	// group; a job's first step, at the head of a backlog, runs alone.
	idled bool
}

// plan is what a step decided the sender does next.
type plan struct {
	// batch: send these requests, then step again to record them.
	batch *batch
	// wait: the sender keeps the lease and steps again after this long
	// (an ordered head waiting for its retry, the throttle, an unordered
	// retry due soon); wakeable: a wake-up ends the wait early (new
	// deliveries of an unordered subscription need not wait for a retry).
	wait     time.Duration
	wakeable bool
	// idle: nothing to send now; linger for new deliveries, then let the
	// subscription go (or, when the job's run ends first, yield keeping it).
	// retryIn: how soon an unordered subscription's next retry falls due
	// (0: none pending); the linger ends then, and the release finds it due.
	idle    bool
	retryIn time.Duration
	// yield: the slice (or the job's run) is used up but work remains; the
	// job keeps the lease and comes back behind other subscriptions' jobs.
	yield bool
	// stop: end the job; another live sender holds the subscription, or it
	// was disabled or deleted.
	stop bool
}

// run works through the subscription's deliveries: step (record the last
// batch, claim the next), send, and again, until a step says to stop, to
// wait longer than the slice allows, or there is nothing left and no
// wake-up came while it lingered; or until the job's run ends, when it
// yields keeping the subscription.
func (s *sender) run(ctx context.Context) error {
	var last *batch
	for {
		p, err := s.step(ctx, last)
		last = nil
		switch {
		case err != nil:
			return err
		case p.batch != nil:
			s.send(ctx, p.batch)
			last = p.batch
			if last.drained && last.allDelivered() {
				s.linger(ctx, s.d.cfg.RecordHold) // woken or not, the next step records last
				s.resume()
			}
		case p.stop:
			return nil
		case p.yield:
			return river.JobSnooze(0)
		case p.wait > 0:
			if !s.pause(ctx, p.wait, p.wakeable) {
				return river.JobSnooze(p.wait)
			}
		case p.idle:
			s.idled = true
			switch s.linger(ctx, p.lingerFor(s.d.cfg.Linger)) {
			case woken:
				s.resume()
				continue
			case runOver:
				return river.JobSnooze(0)
			}
			done, err := s.release(ctx)
			if err != nil || done {
				return err
			}
			s.resume() // the release found new deliveries: it had caught up
		}
	}
}

// lingerFor is how long an idle sender lingers: d, or less when a retry
// falls due sooner.
func (p *plan) lingerFor(d time.Duration) time.Duration {
	if p.retryIn > 0 {
		return min(d, p.retryIn)
	}
	return d
}

// sliceLeft is how much of the sender's slice is left, within the job's
// run.
func (s *sender) sliceLeft() time.Duration {
	return min(s.d.cfg.Slice-time.Since(s.sliceStart), s.runLeft())
}

// runLeft is how much of the job's run is left.
func (s *sender) runLeft() time.Duration { return s.runFor - time.Since(s.start) }

// resume starts a new slice for a sender that caught up and lingered,
// when the process has a sender slot to spare: a sender that keeps up
// with a trickle keeps its job for the whole run, so its subscription is
// seldom without a running sender for the time River takes to fetch the
// job again. While every slot is taken, it yields after its slice like a
// sender with a backlog.
func (s *sender) resume() {
	if s.d.running.Load() < int64(s.d.cfg.Senders) {
		s.sliceStart = time.Now()
	}
}

// pause waits w in the process if that ends within the slice, or until a
// wake-up if wakeable; false if it would not fit, or ctx ended.
func (s *sender) pause(ctx context.Context, w time.Duration, wakeable bool) bool {
	if w >= s.sliceLeft() {
		return false
	}
	var wake chan struct{}
	if wakeable {
		wake = s.wake
	}
	t := time.NewTimer(w)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	case <-wake:
		return true
	}
}

// lingering is how a linger ended.
type lingering int

const (
	// woken: new deliveries were announced; step again.
	woken lingering = iota
	// expired: none came within the linger; let the subscription go.
	expired
	// runOver: the job's run ended first; yield and linger on in the
	// next run, keeping the subscription, so a steady trickle of
	// deliveries never needs a new job.
	runOver
)

// linger waits for a wake-up of the subscription (its round made new
// deliveries) for up to d, and only while the process has a sender slot
// to spare: an idle sender must not keep another subscription's job
// waiting.
func (s *sender) linger(ctx context.Context, d time.Duration) lingering {
	if s.d.running.Load() >= int64(s.d.cfg.Senders) {
		return expired
	}
	w := min(d, s.runLeft())
	if w <= 0 {
		return runOver
	}
	t := time.NewTimer(w)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return expired
	case <-s.d.stopping:
		return expired
	case <-t.C:
		if w < d {
			return runOver
		}
		return expired
	case <-s.wake:
		return woken
	}
}

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
