package delivery

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
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

// plan is what a step decided the sender does next: one of the kinds
// below, with what that kind needs.
type plan struct {
	kind planKind
	// batch: the requests to send (planSend).
	batch *batch
	// wait: how long the sender keeps the lease before it steps again
	// (planWait); wakeable: a wake-up ends the wait early (new deliveries
	// of an unordered subscription need not wait for a retry).
	wait     time.Duration
	wakeable bool
	// retryIn: how soon an unordered subscription's next retry falls due
	// (planIdle; 0: none pending); the linger ends then, and the release
	// finds it due.
	retryIn time.Duration
}

// planKind is what a sender does after a step.
type planKind int8

const (
	// planAgain: step again at once (a refused batch's deliveries were
	// made dead; the next may be sent).
	planAgain planKind = iota
	// planSend: send the batch, then step again to record it.
	planSend
	// planWait: keep the lease and step again after the wait (an ordered
	// head waiting for its retry, the throttle, an unordered retry due
	// soon).
	planWait
	// planIdle: nothing to send now; linger for new deliveries, then let
	// the subscription go (or, when the job's run ends first, yield
	// keeping it).
	planIdle
	// planYield: the slice (or the job's run) is used up but work remains;
	// the job keeps the lease and comes back behind other subscriptions'
	// jobs.
	planYield
	// planStop: end the job; another live sender holds the subscription,
	// or it was disabled or deleted.
	planStop
)

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
		if err != nil {
			return err
		}
		switch p.kind {
		case planSend:
			s.send(ctx, p.batch)
			last = p.batch
			if last.drained && last.allDelivered() {
				s.linger(ctx, s.d.cfg.RecordHold) // woken or not, the next step records last
				s.resume()
			}
		case planStop:
			return nil
		case planYield:
			return river.JobSnooze(0)
		case planWait:
			if !s.pause(ctx, p.wait, p.wakeable) {
				return river.JobSnooze(p.wait)
			}
		case planIdle:
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
