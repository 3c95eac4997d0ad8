// Package lease is the protocol by which one sender at a time sends for a
// webhook subscription. The lease is three columns of the subscription's
// row: lease_job_id, the River job that sends; lease_owner, the River
// client ID of that job's process (NULL: a process outside package
// liveness); lease_until, when the lease runs out. Holding it needs no open
// transaction or connection during an HTTP call, and one sender per
// subscription is what keeps an ordered subscription's deliveries in seq
// order.
//
// The rules, each implemented by one statement or fragment below:
//
//   - Reserve: a round (or a resend, recover, enable) that inserts a
//     delivery job gives the subscription a lease that names no job, for
//     Reservation. The rounds see it live and insert no other job; a
//     delivery job sees it free and takes it.
//   - Take, renew, hand over: a sender's step locks the row FOR NO KEY
//     UPDATE and, unless another sender's lease is live for it
//     (LiveForSenderSQL; then it stops), takes or renews the lease in the
//     statement that records its last batch (SetIfSQL, SetSQL for a group
//     of steps), or alone (Set) when it keeps it through a wait. Taking a
//     lease that ran out, that was reserved, or whose owner died, is the
//     same write: the step decides in the transaction that holds the row
//     lock. (TestConsumer_OneJobUntilItsSenderStarts,
//     TestDelivery_TakesOverFromADeadSender, TestWake_ReleaseRacingARound.)
//   - Take over after a dead process: a lease of another process is live
//     only while that process holds its liveness lock; a judge that finds
//     the lock free (liveness.GoneSQL) keeps it for its transaction, so two
//     senders never both take over from the same dead owner.
//   - Release: a sender with nothing left lets go under FOR UPDATE of the
//     row, which waits for every transaction still giving the subscription
//     deliveries (they hold FOR KEY SHARE); a round either sees the lease
//     gone and inserts a job, or its deliveries are seen by the sender.
//   - End: a change of status (disable, enable) ends whatever lease the
//     subscription had, in the statement that changes it.
//
// Every write of the lease is here: the statements that do nothing else
// (Reserve, Set, Release), and the fragments with which larger statements
// take or end it (SetSQL and SetIfSQL where a step records a batch,
// ClearSQL where a subscription is disabled or enabled). Its readers use
// MineSQL, LiveForSenderSQL and LiveForRoundSQL.
package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bothy/bothy/services/server/internal/liveness"
)

// Execer runs a statement: a transaction or a pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Reservation is how long the lease a job is inserted with waits for the
// job to start: until then, rounds wake nobody and insert no other job.
const Reservation = time.Minute

// ClearSQL is the SET list that ends a lease: the release of its sender,
// or a change of status that ends it.
const ClearSQL = `lease_job_id = NULL, lease_owner = NULL, lease_until = NULL`

// MineSQL is a boolean SQL expression: the lease names the job given by
// the SQL expression job.
func MineSQL(job string) string { return `coalesce(lease_job_id = ` + job + `, false)` }

// LiveForSenderSQL is a boolean SQL expression: for the sender job of
// process owner (SQL expressions), some sender's lease is live. It is
// unexpired and names a job (a reservation is free for whichever delivery
// job runs first), and it is the sender's own, or of its process, or of a
// process outside liveness, or of a process whose liveness lock is held;
// settle is liveness's settle interval in milliseconds. Only an unexpired
// lease of another process pays for the liveness check.
func LiveForSenderSQL(job, owner, settle string) string {
	return `CASE WHEN lease_until IS NULL OR lease_until <= now() OR lease_job_id IS NULL THEN false
            WHEN lease_job_id = ` + job + ` OR lease_owner IS NULL OR lease_owner = ` + owner + ` THEN true
            ELSE NOT ` + liveness.GoneSQL("lease_owner", settle) + `
       END`
}

// LiveForRoundSQL is a boolean SQL expression: for a round that gave the
// subscription deliveries, a sender will see them, so no job is inserted.
// A reservation counts: its job is on its way. settle is as for
// LiveForSenderSQL.
func LiveForRoundSQL(settle string) string {
	return `CASE WHEN lease_until IS NULL OR lease_until <= now() THEN false
                WHEN lease_owner IS NULL THEN true
                ELSE NOT ` + liveness.GoneSQL("lease_owner", settle) + ` END`
}

// SetSQL is the SET list that takes or renews the lease for the job of
// process owner (empty text: outside liveness) for millis milliseconds
// from now, each given as an SQL expression.
func SetSQL(job, owner, millis string) string {
	return `lease_job_id = ` + job + `, lease_owner = NULLIF(` + owner + `::text, ''),
    lease_until = now() + ` + millis + `::bigint * interval '1 millisecond'`
}

// SetIfSQL is SetSQL when the boolean SQL expression cond holds, and
// leaves the lease as it is otherwise: for a statement that records a
// sender's outcomes whether or not it may take the lease.
func SetIfSQL(cond, job, owner, millis string) string {
	return `lease_job_id = CASE WHEN ` + cond + ` THEN ` + job + ` ELSE lease_job_id END,
    lease_owner = CASE WHEN ` + cond + ` THEN NULLIF(` + owner + `::text, '') ELSE lease_owner END,
    lease_until = CASE WHEN ` + cond + ` THEN now() + ` + millis + `::bigint * interval '1 millisecond' ELSE lease_until END`
}

var setSQL = `UPDATE webhook_subscriptions SET ` + SetSQL("$2", "$3", "$4") + ` WHERE id = $1`

// Set takes or renews the lease of subscription sub for job of process
// owner for d. The caller holds the row (FOR NO KEY UPDATE) and found the
// lease its own or not live for it (LiveForSenderSQL).
func Set(ctx context.Context, q Execer, sub uuid.UUID, job int64, owner string, d time.Duration) error {
	if _, err := q.Exec(ctx, setSQL, sub, job, owner, d.Milliseconds()); err != nil {
		return fmt.Errorf("lease %s: take: %w", sub, err)
	}
	return nil
}

const releaseSQL = `UPDATE webhook_subscriptions SET ` + ClearSQL + ` WHERE id = $1`

// Release lets subscription sub go. The caller holds the row locked and
// found the lease its own (MineSQL) or free: a sender with nothing left to
// send (under FOR UPDATE, see the package comment), or a sender whose
// subscription is no longer sent to.
func Release(ctx context.Context, q Execer, sub uuid.UUID) error {
	if _, err := q.Exec(ctx, releaseSQL, sub); err != nil {
		return fmt.Errorf("lease %s: release: %w", sub, err)
	}
	return nil
}

// reserveSQL gives subscriptions $1 a lease that names no job for $2 ms,
// skipping any whose row another transaction holds: a round never waits
// for an owner's change of a subscription (at worst a later round inserts
// a second job, which ends at once).
const reserveSQL = `
UPDATE webhook_subscriptions SET lease_job_id = NULL, lease_owner = NULL,
    lease_until = now() + $2::bigint * interval '1 millisecond'
WHERE id IN (SELECT id FROM webhook_subscriptions WHERE id = ANY($1::uuid[]) FOR NO KEY UPDATE SKIP LOCKED)`

// Reserve gives subscriptions ids, for which the caller inserts delivery
// jobs, a lease that names no job for Reservation.
func Reserve(ctx context.Context, q Execer, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, reserveSQL, ids, Reservation.Milliseconds()); err != nil {
		return fmt.Errorf("lease: reserve %d subscriptions for their jobs: %w", len(ids), err)
	}
	return nil
}
