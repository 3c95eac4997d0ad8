package webhooks

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// WakeChannel is the notification channel on which transactions that give
// subscriptions new pending deliveries name those whose sender is live,
// comma separated: the senders that wait for new work wake at once
// (Deliverer.Wake) instead of a job being inserted per subscription.
const WakeChannel = "webhook_deliveries"

// leaseLiveSQL locks subscriptions $1 that just got pending deliveries in
// this transaction and says, for each, whether a live sender holds it, and
// which job.
//
// The lock (FOR KEY SHARE, also what the deliveries' foreign key took
// when they were inserted) is what keeps a sender from letting the
// subscription go in between: a sender lets go only under FOR UPDATE of
// the row, after it found nothing pending in a statement that starts once
// it holds that lock (sender.release). Either the release waits for this
// transaction and then sees its deliveries, or this statement waits for
// the release and sees the lease gone: a job is inserted exactly when no
// sender will see the new deliveries (TestWake_ReleaseRacingARound).
var leaseLiveSQL = `
SELECT id, CASE WHEN pump_until IS NULL OR pump_until <= now() THEN false
                WHEN pump_owner IS NULL THEN true
                ELSE NOT ` + liveness.GoneSQL("pump_owner", "$2") + ` END,
       coalesce(pump_job_id, 0)
FROM webhook_subscriptions WHERE id = ANY($1::uuid[]) ORDER BY id FOR KEY SHARE`

// maxWakePayload is the most bytes of ids one notification carries
// (PostgreSQL takes up to 8000).
const maxWakePayload = 7800

// LocalSenders are the senders of the process a round runs in. A round
// wakes a live sender of its own process directly once it committed
// (sync.AfterCommit), instead of with a notification on WakeChannel that
// every worker's listening session has to read in a transaction of its
// own.
type LocalSenders interface {
	// Holds says whether job, a sender of subscription sub (as its lease
	// names it, pump_job_id), runs in this process.
	Holds(sub uuid.UUID, job int64) bool
	// WakeIDs wakes the process's senders of subscriptions ids. It must not
	// block.
	WakeIDs(ids []uuid.UUID)
}

// wakeOrStart makes sure that every subscription in from (with the lowest
// seq tx gave it, for the job's trace) has a sender that will see what tx
// wrote: those a live sender of this process holds (local, may be nil)
// are woken once tx committed, outside a round by a notification; the
// others a live sender holds are named in a notification on WakeChannel,
// sent when tx commits; for the rest it returns the jobs to insert with tx.
// settleMillis is liveness's settle interval.
func wakeOrStart(ctx context.Context, tx pgx.Tx, from map[uuid.UUID]int64, settleMillis int64, local LocalSenders) ([]DeliverArgs, error) {
	if len(from) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, 0, len(from))
	for id := range from {
		ids = append(ids, id)
	}
	rows, err := tx.Query(ctx, leaseLiveSQL, ids, settleMillis)
	if err != nil {
		return nil, fmt.Errorf("webhooks: senders of %d subscriptions: %w", len(ids), err)
	}
	var jobs []DeliverArgs
	var wake []string
	var mine []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		var live bool
		var job int64
		if err := rows.Scan(&id, &live, &job); err != nil {
			rows.Close()
			return nil, fmt.Errorf("webhooks: senders: %w", err)
		}
		switch {
		case !live:
			jobs = append(jobs, DeliverArgs{SubscriptionID: id, Seq: from[id]})
		case local != nil && job != 0 && local.Holds(id, job):
			mine = append(mine, id)
		default:
			wake = append(wake, id.String())
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("webhooks: senders: %w", err)
	}
	if len(mine) > 0 && !sync.AfterCommit(ctx, func() { local.WakeIDs(mine) }) {
		for _, id := range mine {
			wake = append(wake, id.String())
		}
	}
	if err := reserve(ctx, tx, jobs); err != nil {
		return nil, err
	}
	return jobs, notifyWake(ctx, tx, wake)
}

// reservation is how long the lease a job is inserted with waits for the
// job to start: until then, rounds wake nobody and insert no other job.
const reservation = time.Minute

// reserveSQL gives subscriptions $1 a lease that names no job for $2 ms,
// skipping any whose row another transaction holds: a round never waits
// for an owner's change of a subscription (at worst a later round inserts
// a second job, which ends at once).
const reserveSQL = `
UPDATE webhook_subscriptions SET pump_job_id = NULL, pump_owner = NULL, pump_until = now() + $2::bigint * interval '1 millisecond'
WHERE id IN (SELECT id FROM webhook_subscriptions WHERE id = ANY($1::uuid[]) FOR NO KEY UPDATE SKIP LOCKED)`

// reserve gives the subscriptions of jobs a lease that names no job: live
// for the rounds, which insert no other job for them meanwhile, and free
// for whichever of their delivery jobs runs first (lockSubsSQL). Without it,
// every round until a sender has started would insert another job.
func reserve(ctx context.Context, tx pgx.Tx, jobs []DeliverArgs) error {
	if len(jobs) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(jobs))
	for i := range jobs {
		ids[i] = jobs[i].SubscriptionID
	}
	if _, err := tx.Exec(ctx, reserveSQL, ids, reservation.Milliseconds()); err != nil {
		return fmt.Errorf("webhooks: reserve %d subscriptions for their jobs: %w", len(ids), err)
	}
	return nil
}

// notifyWake queues, in tx, the notifications naming ids on WakeChannel.
func notifyWake(ctx context.Context, tx pgx.Tx, ids []string) error {
	for len(ids) > 0 {
		n, size := 0, 0
		for n < len(ids) && size+len(ids[n])+1 <= maxWakePayload {
			size += len(ids[n]) + 1
			n++
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, WakeChannel, strings.Join(ids[:n], ",")); err != nil {
			return fmt.Errorf("webhooks: wake senders: %w", err)
		}
		ids = ids[n:]
	}
	return nil
}

// startSender is wakeOrStart for one subscription outside a round (a
// resend, a recover, an enable): the job, if one is needed, is inserted
// with jobs in tx.
func startSender(ctx context.Context, tx pgx.Tx, jobs JobInserter, subID uuid.UUID, seq int64) error {
	start, err := wakeOrStart(ctx, tx, map[uuid.UUID]int64{subID: seq}, liveness.Settle.Milliseconds(), nil)
	if err != nil {
		return err
	}
	for i := range start {
		if _, err := jobs.InsertTx(ctx, tx, start[i], nil); err != nil {
			return fmt.Errorf("insert delivery job: %w", err)
		}
	}
	return nil
}
