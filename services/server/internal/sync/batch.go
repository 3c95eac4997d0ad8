package sync

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// batchSizer is how many events one consumer's next round reads. A round
// that runs out of time is rolled back whole, so trying it again at the
// same size would fail the same way for as long as the events are there:
// the consumer would stop. After a timeout the batch is halved (down to one
// event), below the size that failed; after a round that took less than a
// quarter of the timeout it doubles again, up to consumer.batch_size but
// not to a size that timed out within forget.
type batchSizer struct {
	max, size int
	// ceiling is the size that last timed out, at failedAt; 0: none.
	ceiling  int
	failedAt time.Time
	forget   time.Duration
}

func newBatchSizer(max int, forget time.Duration) *batchSizer {
	return &batchSizer{max: max, size: max, forget: forget}
}

// timedOut learns from a round that ran out of time after reading read
// events (0: it failed before it read them).
func (b *batchSizer) timedOut(read int, now time.Time) {
	n := b.size
	if read > 0 {
		n = min(n, read)
	}
	b.ceiling, b.failedAt = n, now
	b.size = max(1, n/2)
}

// succeeded learns from a round that committed after took.
func (b *batchSizer) succeeded(took, timeout time.Duration, now time.Time) {
	if b.ceiling > 0 && now.Sub(b.failedAt) > b.forget {
		b.ceiling = 0
	}
	if b.size >= b.max || took > timeout/4 {
		return
	}
	next := min(b.max, 2*b.size)
	if b.ceiling > 0 {
		next = min(next, b.ceiling-1)
	}
	b.size = max(b.size, next)
}

// isTimeout reports whether err is a round, query or statement that ran
// out of time: the context's deadline (consumer.round_timeout), a network
// timeout, or PostgreSQL's query_canceled (statement_timeout; also a
// cancel by an operator, which a smaller batch does not hurt).
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}
