package postgres

import (
	"context"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// notifier sends NOTIFY event_log after commits, at most one at a time:
// signals that arrive while one is in flight merge into a single follow-up.
// Each NOTIFY takes PostgreSQL's cluster-wide notify lock through its own
// commit, so sending one per producer commit would cost as much as the
// commits themselves; readers only need to know "something new".
type notifier struct {
	pool *pgxpool.Pool

	mu      gosync.Mutex
	pending bool
	running bool
	wg      gosync.WaitGroup
}

func newNotifier(pool *pgxpool.Pool) *notifier { return &notifier{pool: pool} }

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
		n.pending = false
		n.mu.Unlock()
		// A failed NOTIFY is not fatal: consumers also poll.
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = n.pool.Exec(ctx, `SELECT pg_notify($1, '')`, Channel)
		cancel()
		time.Sleep(time.Until(sent.Add(notifyGap)))
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
