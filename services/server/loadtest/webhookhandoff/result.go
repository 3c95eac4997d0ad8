package webhookhandoff

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// result is what the measured load showed.
type result struct {
	events     int
	expected   int // deliveries the events should have made
	latencies  []time.Duration
	missing    int
	duplicates int
	outOfOrder int
	badSig     int
	p50, p95   time.Duration
	p99, max   time.Duration
	stages     []harness.Stage
	// sentEarlier counts deliveries whose sending step began before the
	// River fetch of the job their round made: a job already running for
	// the subscription sent them.
	sentEarlier int
	// wall runs from the start of the measured load to the end of the
	// wait for its deliveries; appending to the last event's commit (the
	// producers fall behind the rate when the machine cannot keep up).
	wall, appending time.Duration

	loadBefore, loadAfter string
}

// collect takes the latencies and the receiver's counts for ids.
func (h *handoff) collect(r *result, ids []uuid.UUID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rcv.mu.Lock()
	defer h.rcv.mu.Unlock()
	r.events = len(ids)
	for _, id := range ids {
		t := h.dest[id]
		r.expected += len(t.subs)
		for _, k := range t.subs {
			if at, ok := h.rcv.arrivals[delivery{sub: k, id: id}]; ok {
				r.latencies = append(r.latencies, at.Sub(h.commits[id]))
			}
		}
	}
	r.missing = r.expected - len(r.latencies)
	r.duplicates, r.outOfOrder, r.badSig = h.rcv.duplicates, h.rcv.outOfOrder, h.rcv.badSig
	slices.Sort(r.latencies)
	r.p50, r.p95, r.p99 = harness.Quantile(r.latencies, .50), harness.Quantile(r.latencies, .95), harness.Quantile(r.latencies, .99)
	if n := len(r.latencies); n > 0 {
		r.max = r.latencies[n-1]
	}
}

// deliveriesSQL reads the measured events' delivery rows: created_at is
// the round's transaction start, first_attempt_at the start of the step
// transaction that claimed the first send.
const deliveriesSQL = `
SELECT d.subscription_id, d.event_seq, d.event_id, e.committed_at, d.created_at, d.first_attempt_at
FROM webhook_deliveries d JOIN event_log e ON e.seq = d.event_seq
WHERE d.event_id = ANY($1) AND d.first_attempt_at IS NOT NULL`

// jobsSQL reads the delivery jobs: a round makes one per subscription it
// added deliveries to, with the lowest seq it added.
const jobsSQL = `
SELECT (args->>'subscription_id')::uuid, (args->>'seq')::bigint, attempted_at
FROM river_job WHERE kind = $1 AND attempted_at IS NOT NULL`

// job is one delivery job as jobsSQL reads it.
type job struct {
	seq       int64
	attempted time.Time
}

// stages reads where the time went: commit -> round (the delivery row),
// round -> River's fetch of the job that round made for the subscription,
// fetch -> the step that claimed the send, and that step -> the verified
// receipt (the step's commit, signing, the request, verification).
func (h *handoff) stages(ctx context.Context, r *result, ids []uuid.UUID) error {
	pool := h.scratch.Pool
	jobs := map[uuid.UUID][]job{}
	rows, err := pool.Query(ctx, jobsSQL, webhooks.KindDeliver)
	if err != nil {
		return err
	}
	for rows.Next() {
		var sub uuid.UUID
		var j job
		if err := rows.Scan(&sub, &j.seq, &j.attempted); err != nil {
			return err
		}
		jobs[sub] = append(jobs[sub], j)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, js := range jobs {
		slices.SortFunc(js, func(a, b job) int { return cmp.Compare(a.seq, b.seq) })
	}
	index := make(map[uuid.UUID]int, len(h.subIDs))
	for k, id := range h.subIDs {
		index[id] = k
	}
	var round, fetch, claim, send []time.Duration
	rows, err = pool.Query(ctx, deliveriesSQL, ids)
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
		// The round's job: the last one whose lowest seq is at most seq.
		if i, _ := slices.BinarySearchFunc(js, seq+1, func(j job, s int64) int { return cmp.Compare(j.seq, s) }); i > 0 {
			at := js[i-1].attempted
			fetch = append(fetch, at.Sub(created))
			if first.Before(at) {
				r.sentEarlier++
			} else {
				claim = append(claim, first.Sub(at))
			}
		}
		h.rcv.mu.Lock()
		received, ok := h.rcv.arrivals[delivery{sub: index[sub], id: id}]
		h.rcv.mu.Unlock()
		if ok {
			send = append(send, received.Sub(first))
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	r.stages = []harness.Stage{
		harness.NewStage("commit -> round", round), harness.NewStage("round -> River fetch", fetch),
		harness.NewStage("fetch -> sending step", claim), harness.NewStage("sending step -> receipt", send),
	}
	return nil
}

// verdict says why the run fails, or "", and whether the p95 was the only
// reason.
func (r *result) verdict(budget time.Duration) (string, bool) {
	var why []string
	if len(r.latencies) == 0 {
		why = append(why, "no delivery arrived")
	}
	slow := r.p95 > budget
	if slow {
		why = append(why, fmt.Sprintf("p95 %s above perf.webhook_handoff_p95 %s", harness.MS(r.p95), harness.MS(budget)))
	}
	for _, c := range []struct {
		n    int
		what string
	}{
		{r.missing, "deliveries missing"}, {r.duplicates, "deliveries received twice"},
		{r.outOfOrder, "deliveries out of order on ordered subscriptions"}, {r.badSig, "signatures failed"},
	} {
		if c.n > 0 {
			why = append(why, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return strings.Join(why, "; "), slow && len(why) == 1
}

// report prints the summary, writes it and the histogram into --out and
// returns the verdict as an error.
func (h *handoff) report(r *result, budget time.Duration, stdout io.Writer) error {
	verdict, onlyP95 := r.verdict(budget)
	sum := r.summary(h.opts, budget, verdict)
	fmt.Fprint(stdout, sum)
	o := h.opts
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	txt, png := filepath.Join(o.out, "webhook_handoff.txt"), filepath.Join(o.out, "webhook_handoff.png")
	if err := os.WriteFile(txt, []byte(sum), 0o644); err != nil {
		return err
	}
	panel := harness.Panel{
		Title: fmt.Sprintf("%.0f events/s, %d subscriptions on %d spaces: %d deliveries, missing %d",
			o.Rate, o.subscriptions, o.spaces, len(r.latencies), r.missing),
		Axis:      "ms from producer commit to verified webhook request",
		Latencies: r.latencies, P50: r.p50, P95: r.p95, P99: r.p99, Max: r.max,
	}
	if err := harness.WriteHistogram(png, []harness.Panel{panel}, budget); err != nil {
		return fmt.Errorf("histogram: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", txt, png)
	switch {
	case onlyP95:
		return fmt.Errorf("%w: %s", ErrP95OverBudget, verdict)
	case verdict != "":
		return fmt.Errorf("%w: %s", ErrOverBudget, verdict)
	}
	return nil
}

func (r *result) summary(o *options, budget time.Duration, verdict string) string {
	var b strings.Builder
	ms := harness.MS
	fmt.Fprintf(&b, "webhook_handoff: producer commit -> webhook request received, signature verified\n")
	fmt.Fprintf(&b, "date %s, %s, %d CPUs, GOMAXPROCS %d\n", time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(&b, "rate %.0f events/s, %s measured, %d subscriptions (%d unordered) on %d spaces, fanout %d, %d producers; wall %s\n",
		o.Rate, o.Duration, o.subscriptions, o.unordered, o.spaces, o.fanout, o.Producers, r.wall.Round(time.Second))
	fmt.Fprintf(&b, "load average before %s, after %s\n", r.loadBefore, r.loadAfter)
	fmt.Fprintf(&b, "budget perf.webhook_handoff_p95 = %s\n\n", ms(budget))
	fmt.Fprintf(&b, "%8s %10s %8s %8s %8s %8s %8s %10s %12s %14s\n", "events", "deliveries", "p50", "p95", "p99", "max", "missing", "duplicates", "out-of-order", "bad signatures")
	fmt.Fprintf(&b, "%8d %10d %8s %8s %8s %8s %8d %10d %12d %14d\n", r.events, len(r.latencies), ms(r.p50), ms(r.p95), ms(r.p99), ms(r.max),
		r.missing, r.duplicates, r.outOfOrder, r.badSig)
	fmt.Fprintf(&b, "appended in %s (%.1f events/s committed)\n", r.appending.Round(100*time.Millisecond), float64(r.events)/max(r.appending.Seconds(), 1e-9))
	fmt.Fprintf(&b, "missing: not received %s after the load (--drain); deliveries per second from the load's start to the end of that wait: %.1f\n",
		o.drain, float64(len(r.latencies))/max(r.wall.Seconds(), 1e-9))
	fmt.Fprintf(&b, "\nwhere the time went (delivery rows and River's job timestamps; each stage's quantiles on their own):\n")
	fmt.Fprintf(&b, "%-26s %8s %8s %8s %8s\n", "stage", "n", "p50", "p95", "p99")
	for _, st := range r.stages {
		fmt.Fprintf(&b, "%-26s %8d %8s %8s %8s\n", st.Name, st.N, ms(st.P50), ms(st.P95), ms(st.P99))
	}
	fmt.Fprintf(&b, "sent by a job fetched before their round's job: %d\n", r.sentEarlier)
	if verdict == "" {
		fmt.Fprintf(&b, "PASS: p95 %s <= %s\n", ms(r.p95), ms(budget))
	} else {
		fmt.Fprintf(&b, "FAIL: %s\n", verdict)
	}
	return b.String()
}
