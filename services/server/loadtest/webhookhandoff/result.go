package webhookhandoff

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/loadtest/cost"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// result is what the measured load showed.
type result struct {
	events     int64
	expected   int // deliveries the events should have made
	missing    int
	duplicates int
	outOfOrder int
	badSig     int
	unexpected int
	requests   int
	// cost is the worker's, per delivery received; tripKinds breaks its
	// round trips down; producerCPU is the hand-off producer's.
	cost        cost.PerDelivery
	tripKinds   string
	producerCPU time.Duration
	statements  []cost.Statement

	// Hand-off mode only.
	latencies []time.Duration
	p50, p95  time.Duration
	p99, max  time.Duration
	stages    []harness.Stage
	stagesErr error
	// sentEarlier counts deliveries that a sender already running for the
	// subscription sent: no job of theirs was fetched between their round
	// and their send.
	sentEarlier int
	// wall runs from the start of the measured load to the end of the
	// wait for its deliveries; appending to the last event's commit (the
	// producers fall behind the rate when the machine cannot keep up).
	wall, appending time.Duration

	loadBefore, loadAfter string
}

// fromStats takes the receiver's counts.
func (r *result) fromStats(s *receiverStats) {
	r.expected, r.missing = s.Expected+s.Missing, s.Missing
	r.duplicates, r.outOfOrder, r.badSig, r.unexpected, r.requests = s.Duplicates, s.OrderViolations, s.BadSignatures, s.Unexpected, s.Requests
}

// eventsSQL reads the measured events: committed_at is taken by the server
// under the counter lock right before COMMIT, on this machine's clock.
const eventsSQL = `SELECT id, space, type, committed_at FROM event_log WHERE seq BETWEEN $1 AND $2`

// collect takes each measured delivery's latency, from its event's commit
// to its arrival, and where the time went.
func (h *handoff) collect(ctx context.Context, r *result, res *phaseResult) error {
	if err := h.scratch.Connect(ctx); err != nil {
		return err
	}
	arrivals, err := h.rcv.arrivals(ctx)
	if err != nil {
		return err
	}
	index := map[[2]string]int{}
	for i, t := range h.targets {
		index[[2]string{t.space, t.typ}] = i
	}
	rows, err := h.scratch.Pool.Query(ctx, eventsSQL, res.FirstSeq, res.LastSeq)
	if err != nil {
		return err
	}
	for rows.Next() {
		var e eventRow
		var space, typ string
		if err := rows.Scan(&e.id, &space, &typ, &e.committed); err != nil {
			return err
		}
		r.events++
		for _, k := range h.targets[index[[2]string{space, typ}]].subs {
			if at, ok := arrivals[delivery{sub: k, id: e.id}]; ok {
				r.latencies = append(r.latencies, at.Sub(e.committed))
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	slices.Sort(r.latencies)
	r.p50, r.p95, r.p99 = harness.Quantile(r.latencies, .50), harness.Quantile(r.latencies, .95), harness.Quantile(r.latencies, .99)
	if n := len(r.latencies); n > 0 {
		r.max = r.latencies[n-1]
	}
	// The delivery rows are the engine's: a build whose rows say less only
	// loses this breakdown.
	r.stagesErr = h.stages(ctx, r, res, arrivals)
	return nil
}

// deliveriesSQL reads the measured events' delivery rows: created_at is
// the round's transaction start, first_attempt_at the start of the step
// that claimed the first send.
const deliveriesSQL = `
SELECT d.subscription_id, d.event_seq, d.event_id, e.committed_at, d.created_at, d.first_attempt_at
FROM webhook_deliveries d JOIN event_log e ON e.seq = d.event_seq
WHERE d.event_seq BETWEEN $1 AND $2 AND d.first_attempt_at IS NOT NULL`

// jobsSQL reads the delivery jobs: a round makes one for a subscription
// it added deliveries to, with the lowest seq it added.
const jobsSQL = `
SELECT (args->>'subscription_id')::uuid, (args->>'seq')::bigint, attempted_at
FROM river_job WHERE kind = $1 AND attempted_at IS NOT NULL`

// job is one delivery job as jobsSQL reads it.
type job struct {
	seq       int64
	attempted time.Time
}

// readJobs returns each subscription's delivery jobs by seq.
func (h *handoff) readJobs(ctx context.Context) (map[uuid.UUID][]job, error) {
	jobs := map[uuid.UUID][]job{}
	rows, err := h.scratch.Pool.Query(ctx, jobsSQL, webhooks.KindDeliver)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var sub uuid.UUID
		var j job
		if err := rows.Scan(&sub, &j.seq, &j.attempted); err != nil {
			return nil, err
		}
		jobs[sub] = append(jobs[sub], j)
	}
	for _, js := range jobs {
		slices.SortFunc(js, func(a, b job) int { return cmp.Compare(a.seq, b.seq) })
	}
	return jobs, rows.Err()
}

// stages reads where the time went: commit -> round (the delivery row),
// round -> River's fetch of the job that round made for the subscription,
// fetch -> the step that claimed the send, and that step -> the verified
// receipt (the step's commit, signing, the request, verification).
func (h *handoff) stages(ctx context.Context, r *result, res *phaseResult, arrivals map[delivery]time.Time) error {
	jobs, err := h.readJobs(ctx)
	if err != nil {
		return err
	}
	index := make(map[uuid.UUID]int, len(h.subIDs))
	for k, id := range h.subIDs {
		index[id] = k
	}
	var round, fetch, claim, woken, send []time.Duration
	rows, err := h.scratch.Pool.Query(ctx, deliveriesSQL, res.FirstSeq, res.LastSeq)
	if err != nil {
		return err
	}
	for rows.Next() {
		var sub, id uuid.UUID
		var seq int64
		var committed, created, first time.Time
		if err := rows.Scan(&sub, &seq, &id, &committed, &created, &first); err != nil {
			return err
		}
		round = append(round, created.Sub(committed))
		js := jobs[sub]
		// The round's job: the last one whose lowest seq is at most seq. A
		// job fetched before the round, or one fetched after the send, is a
		// sender that was running already.
		if i, _ := slices.BinarySearchFunc(js, seq+1, func(j job, s int64) int { return cmp.Compare(j.seq, s) }); i > 0 {
			at := js[i-1].attempted
			if at.Before(created) || first.Before(at) {
				r.sentEarlier++
				woken = append(woken, first.Sub(created))
			} else {
				fetch, claim = append(fetch, at.Sub(created)), append(claim, first.Sub(at))
			}
		}
		if received, ok := arrivals[delivery{sub: index[sub], id: id}]; ok {
			send = append(send, received.Sub(first))
		}
	}
	r.stages = []harness.Stage{
		harness.NewStage("commit -> round", round), harness.NewStage("round -> River fetch", fetch),
		harness.NewStage("fetch -> sending step", claim), harness.NewStage("round -> step (running sender)", woken),
		harness.NewStage("sending step -> receipt", send),
	}
	return rows.Err()
}

// verdict says why the run fails, or "", and whether the p95 was the only
// reason; budget 0 (the backlog mode) checks no latency.
func (r *result) verdict(budget time.Duration) (string, bool) {
	var why []string
	if r.cost.Deliveries == 0 {
		why = append(why, "no delivery arrived")
	}
	slow := budget > 0 && r.p95 > budget
	if slow {
		why = append(why, fmt.Sprintf("p95 %s above perf.webhook_handoff_p95 %s", harness.MS(r.p95), harness.MS(budget)))
	}
	for _, c := range []struct {
		n    int
		what string
	}{
		{r.missing, "deliveries missing"}, {r.duplicates, "deliveries received twice"},
		{r.outOfOrder, "deliveries out of order on ordered subscriptions"}, {r.badSig, "requests failed their signature"},
		{r.unexpected, "deliveries of events the subscription does not filter"},
	} {
		if c.n > 0 {
			why = append(why, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return strings.Join(why, "; "), slow && len(why) == 1
}
