package soak

import (
	"context"
	"fmt"
	"slices"
	gosync "sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// faultEvent is one process or database fault: from the moment the soak
// began it to the moment it was over (the process gone, the backends
// terminated, the server back). It acts at any moment in between: a
// termination waits for each backend to exit, a crash follows a freeze.
type faultEvent struct {
	kind      string
	at, until time.Time
}

// beginFault notes that a fault of kind begins now and returns the moment
// and the function that notes it is over; only its first call counts.
func (h *harness) beginFault(kind string) (time.Time, func()) {
	now := time.Now()
	h.faultLogMu.Lock()
	i := len(h.faultLog)
	h.faultLog = append(h.faultLog, faultEvent{kind: kind, at: now, until: now})
	h.faultLogMu.Unlock()
	return now, gosync.OnceFunc(func() {
		h.faultLogMu.Lock()
		h.faultLog[i].until = time.Now()
		h.faultLogMu.Unlock()
	})
}

// heldJob is a job River still believed a killed worker was running once
// the worker was gone, or the subscription whose sender claim it held.
type heldJob struct {
	id   int64     // 0 for a claim
	kind string    // the job's kind, or kindClaim
	sub  uuid.UUID // the subscription of a webhook_out.deliver job or claim
}

// kindClaim marks a webhook subscription whose sender claim the killed
// worker held: no other job sends for it until the claim is taken over.
const kindClaim = "claim"

// takeover is what one SIGKILL left running and how soon other workers
// took each job over: River's rescue_stuck_jobs_after (2 minutes) would be
// the time without the liveness mechanism.
type takeover struct {
	victim string
	at     time.Time
	jobs   []heldJob
	took   []time.Duration // per job; -1 if not within takeoverLimit
}

// takeoverLimit bounds the watch of one kill.
const takeoverLimit = 90 * time.Second

const heldJobsSQL = `
SELECT id, kind, coalesce(args->>'subscription_id', '') FROM river_job
WHERE state = 'running' AND attempted_by[array_upper(attempted_by, 1)] = $1
UNION ALL
SELECT 0, '` + kindClaim + `', id::text FROM webhook_subscriptions WHERE lease_owner = $1 AND lease_until > now()`

// stillHeldSQL lists the jobs still running under the dead client and the
// claims it still holds: a job is taken over once it was made available
// again (and fetched) or ended, a claim once another job claimed it, it
// was released or it expired.
const stillHeldSQL = `
SELECT id, '' FROM river_job
WHERE id = ANY ($1) AND state = 'running' AND attempted_by[array_upper(attempted_by, 1)] = $2
UNION ALL
SELECT 0, id::text FROM webhook_subscriptions WHERE id = ANY ($3) AND lease_owner = $2 AND lease_until > now()`

// heldJobs lists the jobs River believes clientID, the killed worker
// name, runs. When it cannot, the takeover of that kill goes unmeasured:
// a harness error that hides that check.
func (h *harness) heldJobs(ctx context.Context, name, clientID string) []heldJob {
	hides := []string{fmt.Sprintf("%s (%s)", checkTakeoverOfAKill, name)}
	if clientID == "" {
		h.harnessErr(hides, "%s logged no River client ID (liveness lock) before it was killed", name)
		return nil
	}
	var out []heldJob
	err := h.query(ctx, 10*time.Second, func(ctx context.Context) error {
		rows, err := h.pool.Query(ctx, heldJobsSQL, clientID)
		if err != nil {
			return err
		}
		out = nil
		var j heldJob
		var sub string
		_, err = pgx.ForEachRow(rows, []any{&j.id, &j.kind, &sub}, func() error {
			j.sub, _ = uuid.Parse(sub)
			out = append(out, j)
			return nil
		})
		return err
	})
	if err != nil {
		h.harnessErr(hides, "list the jobs of %s after the kill: %v", name, err)
		return nil
	}
	return out
}

// measureTakeover polls until every job the killed worker held is no
// longer running under its client ID, or takeoverLimit passes, and records
// the times. It does not poll while the workers are frozen before a crash.
func (h *harness) measureTakeover(ctx context.Context, victim, clientID string, at time.Time, jobs []heldJob) {
	t := takeover{victim: victim, at: at, jobs: jobs, took: make([]time.Duration, len(jobs))}
	pending := len(jobs)
	for i := range t.took {
		t.took[i] = -1
	}
	for pending > 0 && time.Since(at) < takeoverLimit && ctx.Err() == nil {
		if !h.quiet.Load() {
			var ids []int64
			var subs []uuid.UUID
			for i, j := range jobs {
				if t.took[i] < 0 {
					ids = append(ids, j.id)
					subs = append(subs, j.sub)
				}
			}
			still, err := h.stillHeld(ctx, ids, subs, clientID)
			if err == nil {
				now := time.Since(at)
				for i, j := range jobs {
					if t.took[i] < 0 && !still[j.key()] {
						t.took[i] = now
						pending--
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	h.faultLogMu.Lock()
	h.takeovers = append(h.takeovers, t)
	h.faultLogMu.Unlock()
	var worst time.Duration
	for _, d := range t.took {
		worst = max(worst, d)
		if d < 0 {
			worst = -1
			break
		}
	}
	if len(jobs) > 0 {
		h.logf("takeover after SIGKILL of %s: %d jobs and sender claims, all taken over after %s", victim, len(jobs), fmtTook(worst))
	}
}

// key identifies a held job or claim in stillHeld's answer.
func (j heldJob) key() string {
	if j.kind == kindClaim {
		return "claim " + j.sub.String()
	}
	return fmt.Sprint(j.id)
}

func (h *harness) stillHeld(ctx context.Context, ids []int64, subs []uuid.UUID, clientID string) (map[string]bool, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := h.pool.Query(qctx, stillHeldSQL, ids, clientID, subs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	still := map[string]bool{}
	for rows.Next() {
		var j heldJob
		var sub string
		if err := rows.Scan(&j.id, &sub); err != nil {
			return nil, err
		}
		if sub != "" {
			j.kind, j.sub = kindClaim, uuid.MustParse(sub)
		}
		still[j.key()] = true
	}
	return still, rows.Err()
}

func fmtTook(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("NOT within %s", takeoverLimit)
	}
	return d.Round(10 * time.Millisecond).String()
}

// percentile returns the p-th percentile (0..1, nearest rank) of ds, which
// it sorts; 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(float64(len(ds))*p+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
