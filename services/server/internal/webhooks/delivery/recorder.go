package delivery

import (
	"context"
	"log/slog"
	gosync "sync"
	"time"

	"github.com/google/uuid"
)

// recorder records the 2xx answers of a process's senders as they come
// (those of batches it may record, batch.eager), coalesced: every RecordEvery (or once recordMax deliveries wait), one
// statement records the answers of every subscription of the process, so
// that a worker lost in the middle of a batch sends again only what was in
// flight and what was answered since the last flush, not the whole batch.
//
// The sender's next step still records what the recorder has not: before
// it begins, it withdraws its answers that wait for a flush and waits for a
// flush that has them, so every answer is recorded once, by the recorder or
// by the step, and the step's claim sees the recorder's deliveries as
// delivered. A failed flush hands its answers back to their steps. The
// recorder takes no lock on a subscription's row: the step moves the
// subscription's last delivered seq past what the recorder recorded, with
// its lease.
type recorder struct {
	d     *Deliverer
	every time.Duration

	mu      gosync.Mutex
	settled *gosync.Cond // broadcast when a flush ends
	queue   []answered
	waiting int // deliveries of queue still to be flushed
	running bool
	full    chan struct{}
}

// recordMax is how many waiting deliveries make the recorder flush before
// RecordEvery is up.
const recordMax = 1000

// answered is a request answered 2xx, of subscription sub.
type answered struct {
	sub uuid.UUID
	r   *request
}

// recState is where a request's 2xx answer stands with the recorder.
type recState int8

const (
	// recNone: the step records it.
	recNone recState = iota
	// recQueued: it waits for the next flush.
	recQueued
	// recFlushing: a flush is recording it.
	recFlushing
	// recDone: the recorder recorded it.
	recDone
)

func newRecorder(d *Deliverer, every time.Duration) *recorder {
	c := &recorder{d: d, every: every, full: make(chan struct{}, 1)}
	c.settled = gosync.NewCond(&c.mu)
	return c
}

// add queues r, answered 2xx, for the next flush. The flushing goroutine
// runs while answers wait and ends once none does.
func (c *recorder) add(sub uuid.UUID, r *request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r.rec = recQueued
	c.queue = append(c.queue, answered{sub: sub, r: r})
	c.waiting += len(r.items)
	if c.waiting >= recordMax {
		signal(c.full)
	}
	if !c.running {
		c.running = true
		go c.run()
	}
}

// settle readies last for its step: answers still queued are withdrawn,
// for the step to record, and a flush that has some of them is waited for.
// Afterwards a request's rec is recDone (recorded) or recNone.
func (c *recorder) settle(last *batch) {
	if last == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		flushing := false
		for _, r := range last.requests {
			switch r.rec {
			case recQueued:
				r.rec = recNone
				c.waiting -= len(r.items)
			case recFlushing:
				flushing = true
			}
		}
		if !flushing {
			return
		}
		c.settled.Wait()
	}
}

// run flushes the queue every RecordEvery, or sooner when it is full,
// until it finds nothing to flush.
func (c *recorder) run() {
	t := time.NewTimer(c.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.full:
		}
		taken := c.take()
		if len(taken) == 0 {
			return
		}
		c.flush(taken)
		t.Reset(c.every)
	}
}

// take takes the queued answers for a flush; with none, it ends the
// flushing goroutine.
func (c *recorder) take() []answered {
	c.mu.Lock()
	defer c.mu.Unlock()
	var taken []answered
	for _, a := range c.queue {
		if a.r.rec == recQueued {
			a.r.rec = recFlushing
			taken = append(taken, a)
		}
	}
	c.queue, c.waiting = nil, 0
	select {
	case <-c.full:
	default:
	}
	if len(taken) == 0 {
		c.running = false
	}
	return taken
}

// flush records taken in one statement; if that fails, their steps record
// them.
func (c *recorder) flush(taken []answered) {
	var o outcomes
	for _, a := range taken {
		o.addRequest(a.sub, a.r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	db := c.d.pool
	if c.d.cfg.Records != nil {
		db = c.d.cfg.Records
	}
	_, err := db.Exec(ctx, recordedSQL, o.subs, o.seqs, o.codes, o.secs, o.excerpts, o.started, o.msgs)
	state := recDone
	if err != nil {
		state = recNone
		c.d.cfg.Logger.WarnContext(ctx, "webhook senders: recording answers failed; their senders' next steps record them",
			slog.Int("deliveries", len(o.seqs)), slog.Any("error", err))
	}
	c.mu.Lock()
	for _, a := range taken {
		a.r.rec = state
	}
	c.settled.Broadcast()
	c.mu.Unlock()
}

// recordedSQL records 2xx answers of many subscriptions, as deliveredSQL
// does, without touching the subscriptions: the attempts ($1-$7:
// subscription, seq, code, seconds, excerpt, start, webhook-id as messageID
// gives it) and their deliveries finished. Each delivery is looked up by
// its primary key, one at a time (LIMIT 1 keeps the planner from turning
// the lookups into a join that reads the subscriptions' pending
// deliveries; no status condition in it, so that no partial index by
// subscription serves it): the answers of a process's senders span many
// subscriptions, each at its own place in its backlog, so no one seq range
// bounds them as it bounds a step's (pendingAtSQL).
const recordedSQL = `
WITH o AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::float8[], $5::text[], $6::timestamptz[], $7::text[])
        AS o(sub, seq, code, secs, excerpt, started, msg)
), a AS (
    INSERT INTO webhook_attempts (subscription_id, event_seq, attempted_at, status_code, duration_seconds, response_excerpt, message_id)
    SELECT sub, seq, started, NULLIF(code, 0), secs, NULLIF(excerpt, ''), NULLIF(msg, '') FROM o
)
UPDATE webhook_deliveries w SET status = 'delivered', attempts = w.attempts + 1,
    first_attempt_at = coalesce(w.first_attempt_at, o.started), finished_at = now(), last_error = NULL, next_attempt_at = NULL
FROM o CROSS JOIN LATERAL (
    SELECT ctid FROM webhook_deliveries WHERE subscription_id = o.sub AND event_seq = o.seq LIMIT 1
) k
WHERE w.ctid = k.ctid AND w.status = 'pending'`
