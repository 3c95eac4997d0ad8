package postgres

import (
	"context"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// notifier sends NOTIFY event_log after commits, at most one at a time and
// at most one per notifyGap: signals that arrive meanwhile merge into a
// single follow-up. Each NOTIFY takes PostgreSQL's cluster-wide notify lock
// through its own commit, and each is a transaction in every listening
// session that reads it, so sending one per producer commit would cost as
// much as the commits themselves; readers only need to know "something
// new". When one is due, an append carries it in its flush transaction
// (take, flushNotifySQL) instead of a transaction of its own.
type notifier struct {
	pool *pgxpool.Pool

	mu      gosync.Mutex
	pending bool
	running bool
	// last is when the last notification was sent or carried.
	last time.Time
	wg   gosync.WaitGroup
}

func newNotifier(pool *pgxpool.Pool) *notifier { return &notifier{pool: pool} }

// take says whether a flush about to be sent may carry the notification:
// the last one started notifyGap ago or more. The notification then counts
// as sent, and serves a signal that waits for the gap.
func (n *notifier) take() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if time.Since(n.last) < notifyGap {
		return false
	}
	n.last, n.pending = time.Now(), false
	return true
}

// signal asks for a notification after the gap, sent by the notifier.
func (n *notifier) signal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pending = true
	if n.running {
		return
	}
	n.running = true
	n.wg.Add(1)
	go n.send()
}

func (n *notifier) send() {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		if !n.pending {
			n.running = false
			n.mu.Unlock()
			return
		}
		if wait := time.Until(n.last.Add(notifyGap)); wait > 0 {
			n.mu.Unlock()
			time.Sleep(wait)
			continue
		}
		n.pending, n.last = false, time.Now()
		n.mu.Unlock()
		// A failed NOTIFY is not fatal: consumers also poll.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = n.pool.Exec(ctx, `SELECT pg_notify($1, '')`, Channel)
		cancel()
	}
}

// notifyGap is the least time between the starts of two notifications of a
// process: the signals of the commits meanwhile merge into the next one.
// A consumer starts its notified rounds at most as often
// (consumer.round_cooldown's default), so notifying more often would only
// cost the producers a transaction each.
const notifyGap = 5 * time.Millisecond

// wait blocks until no notification is in flight.
func (n *notifier) wait() { n.wg.Wait() }
