package soak

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// report is the verified outcome of a run.
type report struct {
	sections   []string
	violations []string
}

func (r *report) fail(format string, args ...any) {
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

func (r *report) table(title string, header string, rows [][]string) {
	var b strings.Builder
	b.WriteString(title + "\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header+"\t")
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
	r.sections = append(r.sections, b.String())
}

// add appends the findings of one check: its sections, then its violations.
func (r *report) add(f *report) {
	r.sections = append(r.sections, f.sections...)
	r.violations = append(r.violations, f.violations...)
}

func (r *report) String() string {
	var b strings.Builder
	b.WriteString("\n")
	for _, s := range r.sections {
		b.WriteString(s + "\n")
	}
	fmt.Fprintf(&b, "VIOLATIONS: %d\n", len(r.violations))
	for i, v := range r.violations {
		if i == 40 {
			fmt.Fprintf(&b, "  ... and %d more\n", len(r.violations)-40)
			break
		}
		fmt.Fprintf(&b, "  - %s\n", v)
	}
	if len(r.violations) == 0 {
		b.WriteString("PASS: every committed event became exactly one job per consumer and target, every acknowledged event survived, nothing lost\n")
	} else {
		b.WriteString("FAIL\n")
	}
	return b.String()
}

func itoa[T ~int | ~int64](n T) string { return fmt.Sprint(n) }

// logEvent is one row of event_log as the checks see it.
type logEvent struct {
	seq   int64
	id    uuid.UUID
	space string
	// about is the subscription an operational event (one bothy appended
	// itself, its type begins with webhooks.OperationalPrefix) is about;
	// uuid.Nil for the producers' events.
	about       uuid.UUID
	operational bool
}

// verify reads the final state and checks it: the event log against what
// the producers were told, each consumer's jobs and deliveries, the
// arrivals, the cursors, the faults and the run itself, in the report in
// that order.
func (h *harness) verify(ctx context.Context, drained bool, drainTook time.Duration) (*report, error) {
	r := &report{}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	head, events, err := h.readEventLog(ctx)
	if err != nil {
		return nil, err
	}
	r.add(h.verifyEvents(head, events))

	spaceSeqs := seqsBySpace(events)
	wh, err := h.verifyWebhooks(ctx, head, spaceSeqs, seqsAbout(events))
	if err != nil {
		return nil, err
	}
	push, err := h.verifyPush(ctx, spaceSeqs)
	if err != nil {
		return nil, err
	}
	// The jobs table comes first: it is the exactly-once check.
	r.add(jobsTable(wh, push))
	r.add(wh.deliveries)
	r.add(push.deliveries)
	dupsByCause := h.arrivalsReport(r, map[string]int{chanWebhooks: wh.missing, chanPush: push.missing})

	cursors, err := h.verifyCursors(ctx, head)
	if err != nil {
		return nil, err
	}
	r.add(cursors)
	r.add(h.verifyFaults(dupsByCause))
	r.add(h.verifyRun(drained, drainTook))
	return r, nil
}

// readEventLog reads the head of the sequence and every event in the log,
// in seq order.
func (h *harness) readEventLog(ctx context.Context) (int64, []logEvent, error) {
	var head int64
	if err := h.pool.QueryRow(ctx, `SELECT last_seq FROM event_seq`).Scan(&head); err != nil {
		return 0, nil, err
	}
	rows, err := h.pool.Query(ctx, `
SELECT seq, id, space, starts_with(type, $1),
       coalesce(CASE WHEN starts_with(type, $1) THEN (data->>'subscription_id')::uuid END, $2)
FROM event_log ORDER BY seq`, webhooks.OperationalPrefix, uuid.Nil)
	if err != nil {
		return 0, nil, err
	}
	var events []logEvent
	for rows.Next() {
		var e logEvent
		if err := rows.Scan(&e.seq, &e.id, &e.space, &e.operational, &e.about); err != nil {
			return 0, nil, err
		}
		events = append(events, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	return head, events, nil
}

// seqsBySpace lists each space's seqs, in the order of events.
func seqsBySpace(events []logEvent) map[string][]int64 {
	spaceSeqs := map[string][]int64{}
	for _, e := range events {
		spaceSeqs[e.space] = append(spaceSeqs[e.space], e.seq)
	}
	return spaceSeqs
}

// seqsAbout lists the seqs of the operational events about each
// subscription: a subscription is not sent those about itself.
func seqsAbout(events []logEvent) map[uuid.UUID]map[int64]bool {
	about := map[uuid.UUID]map[int64]bool{}
	for _, e := range events {
		if e.operational {
			if about[e.about] == nil {
				about[e.about] = map[int64]bool{}
			}
			about[e.about][e.seq] = true
		}
	}
	return about
}

// targetIDs returns the ids of the soak's webhook subscriptions.
func (h *harness) targetIDs() map[uuid.UUID]bool {
	h.procMu.Lock()
	defer h.procMu.Unlock()
	ids := map[uuid.UUID]bool{}
	for _, t := range h.targets {
		ids[t.id] = true
	}
	return ids
}

// eventCounts is how the log compares with what the producers were told.
type eventCounts struct {
	absent     int // acknowledged, not in the log at all
	replaced   int // acknowledged, another event at its seq
	rbFound    int // rolled back on purpose, yet in the log
	doubtFound int // in doubt, and committed after all
	phantom    int // in the log, written by no producer
}

// verifyEvents checks that the log is gapless up to the head, that every
// acknowledged event is in it at the seq its producer was told, with its
// id, and that it holds no rolled-back event and none nobody wrote.
func (h *harness) verifyEvents(head int64, events []logEvent) *report {
	f := &report{}
	inLog := map[uuid.UUID]bool{}
	idAt := map[int64]uuid.UUID{}
	gaps, operational, strayOps := 0, 0, 0
	known := h.targetIDs()
	for i, e := range events {
		if e.seq != int64(i+1) {
			gaps++
		}
		idAt[e.seq] = e.id
		if e.operational {
			operational++
			if !known[e.about] {
				strayOps++
			}
			continue
		}
		inLog[e.id] = true
	}
	if gaps > 0 || int64(len(events)) != head {
		f.fail("event log is not gapless 1..%d: %d rows, %d out of place", head, len(events), gaps)
	}
	h.prodMu.Lock()
	defer h.prodMu.Unlock()
	c := h.countEvents(inLog, idAt)
	f.table("EVENTS", "\tcount", [][]string{
		{"committed (event_log rows, head)", itoa(head)},
		{"acknowledged to producers: EventLog.Write / POST events", fmt.Sprintf("%d / %d", len(h.acked)-h.ackedHTTP, h.ackedHTTP)},
		{"acknowledged, missing: absent / another event at its seq", fmt.Sprintf("%d / %d", c.absent, c.replaced)},
		{"in doubt (a fault hit the write) / of them committed", fmt.Sprintf("%d / %d", len(h.doubt), c.doubtFound)},
		{"rolled back on purpose: txs before append / at commit", fmt.Sprintf("%d / %d", h.rbBefore, h.rbAtCommit)},
		{"rolled-back events found in the log", itoa(c.rbFound)},
		{"log events no producer wrote", itoa(c.phantom)},
		{"operational events bothy appended / of them about no soak subscription", fmt.Sprintf("%d / %d", operational, strayOps)},
	})
	if n := c.absent + c.replaced; n > 0 {
		where := "after recovery"
		if len(h.crashes) == 0 {
			where = "from the log"
		}
		f.fail("acknowledged events missing %s: %d of %d (%d absent, %d with another event at their seq)",
			where, n, len(h.acked), c.absent, c.replaced)
	}
	if c.rbFound > 0 {
		f.fail("%d events of rolled-back transactions are in the log", c.rbFound)
	}
	if c.phantom > 0 {
		f.fail("%d events in the log were never written", c.phantom)
	}
	if strayOps > 0 {
		f.fail("%d operational events about no subscription of the soak", strayOps)
	}
	return f
}

// countEvents compares the log (its ids, and the id at each seq) with the
// producers' records; the caller holds prodMu. An acknowledged event absent
// from the log was lost; another event at its seq means the seq was handed
// out again.
func (h *harness) countEvents(inLog map[uuid.UUID]bool, idAt map[int64]uuid.UUID) eventCounts {
	var c eventCounts
	for id, seq := range h.acked {
		switch at, ok := idAt[seq]; {
		case !ok:
			c.absent++
		case at != id:
			c.replaced++
		}
	}
	for id := range h.rolledBack {
		if inLog[id] {
			c.rbFound++
		}
	}
	for id := range h.doubt {
		if inLog[id] {
			c.doubtFound++
		}
	}
	for id := range inLog {
		if _, ok := h.acked[id]; !ok && !h.doubt[id] {
			c.phantom++
		}
	}
	return c
}

// verifyCursors checks that every consumer's cursor reached the head.
func (h *harness) verifyCursors(ctx context.Context, head int64) (*report, error) {
	f := &report{}
	var crow [][]string
	crows, err := h.pool.Query(ctx, `SELECT name, last_seq FROM event_consumer_cursors ORDER BY name`)
	if err != nil {
		return nil, err
	}
	for crows.Next() {
		var name string
		var last int64
		if err := crows.Scan(&name, &last); err != nil {
			return nil, err
		}
		ok := "yes"
		if last != head {
			ok = "NO"
			f.fail("cursor %s at %d, head %d", name, last, head)
		}
		crow = append(crow, []string{name, itoa(last), itoa(head), ok})
	}
	crows.Close()
	f.table("CURSORS", "consumer\tlast_seq\thead\tat head", crow)
	return f, nil
}

// faultKinds are the faults the soak injects, in the order of its report.
var faultKinds = []string{faultKill, faultTermPool, faultTermListen, faultPGCrashQuiet, faultPGCrash, faultRevokeWH, faultRevokePush,
	faultWH5xx, faultWHTimeout, faultWH410, faultPush5xx}

// verifyFaults checks that every fault the run needs was injected and had its
// effect, and tabulates each kind with what it did and the duplicate
// arrivals attributed to it.
func (h *harness) verifyFaults(dupsByCause map[string]map[string]int) *report {
	f := &report{}
	required, crashSkipped := h.requiredFaults()
	h.prodMu.Lock()
	crashes := slices.Clone(h.crashes)
	h.prodMu.Unlock()
	var frow [][]string
	for _, k := range faultKinds {
		n, x := h.faultMu.get(k)
		if (k == faultTermPool || k == faultTermListen) && n > 0 && x == 0 {
			f.fail("%s: no backend was found to terminate", k)
		}
		detail := h.faultDetail(k, x)
		if k == faultPGCrashQuiet || k == faultPGCrash {
			detail = crashDetail(k, slices.Contains(required, k), crashSkipped, crashes)
		}
		if slices.Contains(required, k) && n == 0 {
			f.fail("fault %q was never injected", k)
		}
		if strings.HasSuffix(detail, " 0 answers") || detail == "0 answers" || detail == "0 requests held" {
			if n > 0 {
				f.fail("fault %q: the receiver never answered with the fault (no request in the window)", k)
			}
		}
		frow = append(frow, []string{k, itoa(n), detail, itoa(dupsByCause[k][chanWebhooks]), itoa(dupsByCause[k][chanPush])})
	}
	frow = append(frow, []string{noFault, "", "", itoa(dupsByCause[noFault][chanWebhooks]), itoa(dupsByCause[noFault][chanPush])})
	f.table("FAULTS (a duplicate arrival is attributed to the first kill, pool termination or crash after the accepted arrival)",
		"fault\tcount\tdetail\tdup arrivals webhooks\tdup arrivals push", frow)
	return f
}

// requiredFaults lists the faults this run must inject. The crashes are
// among them only when one is planned (why says why not), and the crash
// amid all traffic is left out in short mode.
func (h *harness) requiredFaults() (required []string, why string) {
	required = []string{faultKill, faultTermPool, faultTermListen, faultRevokeWH, faultRevokePush,
		faultWH5xx, faultWHTimeout, faultWH410, faultPush5xx}
	crashPlanned, why := h.pgCrashPlanned()
	if crashPlanned {
		required = append(required, faultPGCrashQuiet)
		if !h.opts.short {
			required = append(required, faultPGCrash)
		}
	}
	return required, why
}

// faultDetail says what a fault other than a crash did; x is the figure
// recorded with it (for terminations, the backends terminated).
func (h *harness) faultDetail(k string, x int) string {
	switch k {
	case faultKill:
		jobs, next, _, _ := h.takeoverFigures()
		return fmt.Sprintf("takeover p95 %s (%d jobs and claims), next healthy webhook 2xx p95 %s", fmtTook(percentile(jobs, .95)), len(jobs),
			fmtTook(percentile(next, .95)))
	case faultTermPool, faultTermListen:
		return fmt.Sprintf("%d backends", x)
	case faultWH5xx:
		return fmt.Sprintf("%d answers", h.target("flaky-5xx").faultResp.Load())
	case faultWHTimeout:
		return fmt.Sprintf("%d requests held", h.target("slow-timeout").faultResp.Load())
	case faultWH410:
		return fmt.Sprintf("%d answers", h.target("gone-410").faultResp.Load())
	case faultPush5xx:
		detail := ""
		for _, d := range h.devices {
			if d.name == "pu-flaky-phone" {
				detail = fmt.Sprintf("%d answers", d.faultResp.Load())
			}
		}
		return detail
	}
	return ""
}

// crashDetail says what the crashes of kind k put at risk and lost, or why
// the run had none.
func crashDetail(k string, required bool, skipped string, crashes []crashResult) string {
	if !required {
		return "skipped (" + cmp.Or(skipped, "short mode") + ")"
	}
	var acked, missing int
	for _, c := range crashes {
		if c.kind == k {
			acked, missing = acked+c.acked, missing+c.missing
		}
	}
	return fmt.Sprintf("acknowledged: %d, missing after recovery: %d", acked, missing)
}

// verifyRun checks the run itself: the backlog drained, and no process
// exited unexpectedly or stopped uncleanly.
func (h *harness) verifyRun(drained bool, drainTook time.Duration) *report {
	f := &report{}
	var misc [][]string
	misc = append(misc, []string{"drained", map[bool]string{true: "yes", false: "NO"}[drained], drainTook.Round(100 * time.Millisecond).String()})
	if !drained {
		f.fail("the backlog did not drain within %s", h.opts.drainTimeout)
	}
	h.notesMu.Lock()
	for _, n := range h.notes {
		f.fail("run: %s", firstLine(n))
	}
	misc = append(misc, []string{"process problems (unexpected exits, unclean stops)", itoa(len(h.notes)), ""})
	h.notesMu.Unlock()
	h.procMu.Lock()
	misc = append(misc, []string{"bothy processes started", itoa(len(h.allProcs)), ""})
	h.procMu.Unlock()
	f.table("RUN", "\tvalue\t", misc)
	return f
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// consumerFindings are what the checks of one consumer found: its rows of
// the jobs table, its deliveries table with the violations of all its
// checks, and how many messages should have arrived at its receivers and
// did not.
type consumerFindings struct {
	jobRows    [][]string
	deliveries *report
	missing    int
}

// jobsTable is the exactly-once check's table: the rows of every consumer.
func jobsTable(consumers ...*consumerFindings) *report {
	var rows [][]string
	for _, c := range consumers {
		rows = append(rows, c.jobRows...)
	}
	f := &report{}
	f.table("JOBS PER CONSUMER PER TARGET AND EVENT (exactly once)", "consumer\ttarget\texpected\tgot\tduplicates\tmissing\textra", rows)
	return f
}

// deliveryRow is one row of webhook_deliveries as the checks see it.
type deliveryRow struct {
	seq    int64
	status string
}

// subscription is the final state of one target's webhook subscription:
// its status, delivery rows in seq order and delivery jobs beyond one per
// seq in the database, and what the soak and the receiver saw.
type subscription struct {
	t          *target
	status     string
	rows       []deliveryRow
	dupJobs    int
	resumes    []int64 // the seq it resumed after at creation and at every enable
	revoked    bool    // its owner's right was revoked
	revokedAt  time.Time
	revokedSeq int64 // the head read after the revocation
	// lateAfter is when a request started later than a sender's timeout
	// after the revocation would arrive: the timeout and a margin, plus
	// the time the workers were frozen meanwhile.
	lateAfter time.Time
	arrivals  []arrival
	badSig    int
}

func (s *subscription) active() bool { return s.status == webhooks.StatusActive }

// verifyWebhooks checks each subscription: its delivery rows against the
// events of its active intervals (its row of the jobs table), then the
// requests at its receiver against the rows and the revocation.
func (h *harness) verifyWebhooks(ctx context.Context, head int64, spaceSeqs map[string][]int64, about map[uuid.UUID]map[int64]bool) (*consumerFindings, error) {
	subs, err := h.subscriptions(ctx)
	if err != nil {
		return nil, err
	}
	f := &consumerFindings{deliveries: &report{}}
	var delRows [][]string
	for _, s := range subs {
		own := about[s.t.id]
		events := slices.DeleteFunc(slices.Clone(spaceSeqs[s.t.space]), func(seq int64) bool { return own[seq] })
		row, found := s.checkRows(events, head)
		f.jobRows = append(f.jobRows, row)
		f.deliveries.add(found)
		row, found, missing := s.checkArrivals()
		delRows = append(delRows, row)
		f.deliveries.add(found)
		f.missing += missing
	}
	f.deliveries.table("WEBHOOK DELIVERIES PER SUBSCRIPTION", "subscription\tspace\tintervals\tstatus\tdelivered\tdead\tskipped\tpending\trequests\tundelivered\tnever-received\tout-of-order\tafter-revoke\tbad-sig", delRows)
	return f, nil
}

// subscriptions reads the final state of every target's subscription.
func (h *harness) subscriptions(ctx context.Context) ([]*subscription, error) {
	status, err := h.subscriptionStatus(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := h.deliveryRows(ctx)
	if err != nil {
		return nil, err
	}
	dupJobs, err := h.duplicateDeliveryJobs(ctx)
	if err != nil {
		return nil, err
	}
	h.procMu.Lock()
	targets := slices.Clone(h.targets)
	h.procMu.Unlock()
	subs := make([]*subscription, 0, len(targets))
	for _, t := range targets {
		s := &subscription{t: t, status: status[t.id], rows: rows[t.id], dupJobs: dupJobs[t.id]}
		t.mu.Lock()
		s.resumes = slices.Clone(t.resumes)
		s.revoked, s.revokedAt, s.revokedSeq = t.revoked, t.revokedAt, t.revokedSeq
		t.mu.Unlock()
		s.lateAfter = h.lateAfter(s.revokedAt)
		s.arrivals, s.badSig = t.snapshot()
		subs = append(subs, s)
	}
	return subs, nil
}

// lateAfter is when a request started later than a sender's timeout after
// a revocation at revokedAt would arrive: a sender that checked the right
// just before the revocation sends within its timeout (whTimeout, and a
// margin), unless it was frozen meanwhile: every freeze that began before
// that moment moves it by how long it lasted after the revocation.
func (h *harness) lateAfter(revokedAt time.Time) time.Time {
	h.faultLogMu.Lock()
	freezes := slices.Clone(h.freezes)
	h.faultLogMu.Unlock()
	slices.SortFunc(freezes, func(a, b freeze) int { return a.from.Compare(b.from) })
	late := revokedAt.Add(whTimeout + 2*time.Second)
	for _, f := range freezes {
		if f.to.After(revokedAt) && !f.from.After(late) {
			late = late.Add(f.to.Sub(later(f.from, revokedAt)))
		}
	}
	return late
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// subscriptionStatus reads every subscription's status.
func (h *harness) subscriptionStatus(ctx context.Context) (map[uuid.UUID]string, error) {
	rows, err := h.pool.Query(ctx, `SELECT id, status FROM webhook_subscriptions`)
	if err != nil {
		return nil, err
	}
	status := map[uuid.UUID]string{}
	var id uuid.UUID
	var st string
	_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error {
		status[id] = st
		return nil
	})
	return status, err
}

// deliveryRows reads every subscription's delivery rows, in seq order.
func (h *harness) deliveryRows(ctx context.Context) (map[uuid.UUID][]deliveryRow, error) {
	rows, err := h.pool.Query(ctx, `SELECT subscription_id, event_seq, status FROM webhook_deliveries ORDER BY subscription_id, event_seq`)
	if err != nil {
		return nil, err
	}
	dels := map[uuid.UUID][]deliveryRow{}
	var id uuid.UUID
	var d deliveryRow
	_, err = pgx.ForEachRow(rows, []any{&id, &d.seq, &d.status}, func() error {
		dels[id] = append(dels[id], d)
		return nil
	})
	return dels, err
}

// duplicateDeliveryJobs counts each subscription's delivery jobs beyond
// one per seq.
func (h *harness) duplicateDeliveryJobs(ctx context.Context) (map[uuid.UUID]int, error) {
	rows, err := h.pool.Query(ctx, `
SELECT (args->>'subscription_id')::uuid, count(*) - 1 FROM river_job WHERE kind = $1
GROUP BY args->>'subscription_id', args->>'seq' HAVING count(*) > 1`, webhooks.KindDeliver)
	if err != nil {
		return nil, err
	}
	dups := map[uuid.UUID]int{}
	var id uuid.UUID
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		dups[id] += n
		return nil
	})
	return dups, err
}

// checkRows checks the subscription's delivery rows against events, the
// seqs of its space, and returns its row of the jobs table: each active
// interval must have rows for a prefix of its events, no row is for
// another seq, and no seq has more than one delivery job.
func (s *subscription) checkRows(events []int64, head int64) ([]string, *report) {
	isEvent := map[int64]bool{}
	for _, e := range events {
		isEvent[e] = true
	}
	has := map[int64]bool{}
	extra := 0
	for _, d := range s.rows {
		has[d.seq] = true
		if !isEvent[d.seq] || d.seq <= s.resumes[0] {
			extra++
		}
	}
	expected, missing := s.expectedRows(events, has, head)
	f := &report{}
	if missing > 0 {
		f.fail("webhooks %s: %d events without a delivery row", s.t.name, missing)
	}
	if extra > 0 {
		f.fail("webhooks %s: %d delivery rows for events it should not have", s.t.name, extra)
	}
	if s.dupJobs > 0 {
		f.fail("webhooks %s: %d duplicate delivery jobs for one (subscription, seq)", s.t.name, s.dupJobs)
	}
	return []string{"webhooks", s.t.name, itoa(expected), itoa(len(s.rows)), itoa(s.dupJobs), itoa(missing), itoa(extra)}, f
}

// expectedRows counts the events that must have a delivery row and those of
// them without one. Each active interval (resume_i, resume_i+1], the last
// ending at the head, must have rows for a prefix of its events (up to its
// last event with a row), the whole of it if it is the last and the
// subscription is still active.
func (s *subscription) expectedRows(events []int64, has map[int64]bool, head int64) (expected, missing int) {
	for i, from := range s.resumes {
		to, last := head, i == len(s.resumes)-1
		if !last {
			to = s.resumes[i+1]
		}
		upTo := from
		for _, e := range events {
			if e > from && e <= to && has[e] {
				upTo = e
			}
		}
		if last && s.active() {
			upTo = to
		}
		for _, e := range events {
			if e > from && e <= upTo {
				expected++
				if !has[e] {
					missing++
				}
			}
		}
	}
	return expected, missing
}

// checkArrivals checks the requests at the subscription's receiver against
// its delivery rows and returns its row of the deliveries table, and how
// many messages should have arrived and did not: every row is delivered
// (as judgeRow says), every delivered row was accepted with a 2xx, requests
// came in seq order and signed, and none after the owner's right was
// revoked.
func (s *subscription) checkArrivals() ([]string, *report, int) {
	sc := s.scanArrivals()
	outOfOrder, afterRevoke, got2xx := sc.outOfOrder, sc.afterRevoke, sc.got2xx
	counts := map[string]int{}
	neverReceived, undelivered := 0, 0
	for _, d := range s.rows {
		counts[d.status]++
		if d.status == webhooks.DeliveryDelivered && !got2xx[d.seq] {
			neverReceived++
		}
		notDelivered, late := s.judgeRow(d)
		if notDelivered {
			undelivered++
		}
		if late {
			if afterRevoke == 0 && sc.firstAfterRevoke == "" {
				sc.firstAfterRevoke = fmt.Sprintf("row of seq %d delivered, revoked at head %d", d.seq, s.revokedSeq)
			}
			afterRevoke++
		}
	}
	f := &report{}
	name := s.t.name
	if undelivered > 0 {
		f.fail("webhooks %s: %d deliveries not delivered", name, undelivered)
	}
	if neverReceived > 0 {
		f.fail("webhooks %s: %d deliveries marked delivered that the receiver never accepted", name, neverReceived)
	}
	if outOfOrder > 0 {
		f.fail("webhooks %s: %d requests arrived out of seq order (first: %s)", name, outOfOrder, sc.firstOutOfOrder)
	}
	if afterRevoke > 0 {
		f.fail("webhooks %s: %d deliveries after the owner's right was revoked (first: %s)", name, afterRevoke, sc.firstAfterRevoke)
	}
	if s.badSig > 0 {
		f.fail("webhooks %s: %d requests with a bad signature", name, s.badSig)
	}
	row := []string{name, s.t.space, itoa(len(s.resumes)), s.status, itoa(counts["delivered"]),
		itoa(counts["dead"]), itoa(counts["skipped"]), itoa(counts["pending"]), itoa(len(s.arrivals)),
		itoa(undelivered), itoa(neverReceived), itoa(outOfOrder), itoa(afterRevoke), itoa(s.badSig)}
	return row, f, undelivered + neverReceived
}

// arrivalScan is what scanArrivals found in a subscription's requests.
type arrivalScan struct {
	outOfOrder, afterRevoke int
	got2xx                  map[int64]bool // the seqs accepted with a 2xx
	// firstOutOfOrder and firstAfterRevoke describe the first request of
	// each kind, so that a failed run says which rule it broke.
	firstOutOfOrder, firstAfterRevoke string
}

// scanArrivals counts the requests that came after one of a higher seq and
// those that came after the owner's right was revoked (for a later event,
// or started later than a sender's timeout after the revocation), and lists
// the seqs accepted with a 2xx.
func (s *subscription) scanArrivals() arrivalScan {
	sc := arrivalScan{got2xx: map[int64]bool{}}
	var maxSeq int64
	var maxAt time.Time
	for _, a := range s.arrivals {
		if a.seq < maxSeq {
			if sc.outOfOrder == 0 {
				sc.firstOutOfOrder = fmt.Sprintf("seq %d (answered %d) %.2fs after seq %d", a.seq, a.status, a.at.Sub(maxAt).Seconds(), maxSeq)
			}
			sc.outOfOrder++
		}
		if a.seq > maxSeq {
			maxSeq, maxAt = a.seq, a.at
		}
		if a.status >= 200 && a.status < 300 {
			sc.got2xx[a.seq] = true
		}
		if s.revoked && (a.seq > s.revokedSeq || a.at.After(s.lateAfter)) {
			if sc.afterRevoke == 0 {
				sc.firstAfterRevoke = fmt.Sprintf("seq %d (answered %d) %.2fs after the revocation at head %d, late after %.2fs", a.seq, a.status,
					a.at.Sub(s.revokedAt).Seconds(), s.revokedSeq, s.lateAfter.Sub(s.revokedAt).Seconds())
			}
			sc.afterRevoke++
		}
	}
	return sc
}

// judgeRow says whether a delivery row should have been delivered and was
// not, and whether it was delivered after the owner's right was revoked. A
// pending row of an active subscription is not delivered. revoked-owner's
// rows must all be delivered while its owner keeps the right; once it is
// revoked none need be, and none of a later event may be. gone-410 was
// disabled: only the rows of its last active interval must be delivered,
// and only while it is active. Every other row must be delivered.
func (s *subscription) judgeRow(d deliveryRow) (undelivered, afterRevoke bool) {
	switch {
	case d.status == webhooks.DeliveryPending && s.active():
		return true, false
	case s.t.name == "revoked-owner":
		if s.revoked {
			return false, d.seq > s.revokedSeq && d.status == webhooks.DeliveryDelivered
		}
		return d.status != webhooks.DeliveryDelivered, false
	case s.t.name == "gone-410":
		return d.seq > s.resumes[len(s.resumes)-1] && s.active() && d.status != webhooks.DeliveryDelivered, false
	default:
		return d.status != webhooks.DeliveryDelivered, false
	}
}

// registration is the final state of one device's push registration: the
// push.deliver jobs that carry a message to it, the final answers recorded
// for it in push_sends, the events of its spaces, and the messages the push
// service decrypted for it.
type registration struct {
	d          *device
	jobs       map[int64][]pushJob // the jobs with a message to it, by seq
	sends      map[int64]int16     // the recorded final answers, by seq
	events     []int64             // the seqs of its spaces' events, in order
	revoked    bool                // its principal's right was revoked
	revokedSeq int64               // the head read after the revocation
	msgs       []pushMessage
	// recordLoss names the fault that explains a message that arrived
	// without a record (accepted at the given time), or "" if none does.
	recordLoss func(accepted time.Time) string
}

// pushJob is one push.deliver job as the checks see it.
type pushJob struct {
	id    int64
	state string
}

// done reports whether the job ended: completed, or cancelled because none
// of its messages could be sent.
func (j pushJob) done() bool { return j.state == "completed" || j.state == "cancelled" }

// upTo is the last seq the registration must have a job for: after a
// revocation, its last job for an event before it.
func (g *registration) upTo() int64 {
	if !g.revoked {
		return 1<<62 - 1
	}
	var upTo int64
	for seq := range g.jobs {
		if seq <= g.revokedSeq {
			upTo = max(upTo, seq)
		}
	}
	return upTo
}

// jobCounts counts the jobs with a message to the registration, those
// beyond one per seq (another job, or the same job naming the device twice
// for the event), and the seqs with a job for an event committed after the
// revocation.
func (g *registration) jobCounts() (total, dups, afterRevoke int) {
	for seq, js := range g.jobs {
		total += len(js)
		dups += len(js) - 1
		if g.revoked && seq > g.revokedSeq {
			afterRevoke++
		}
	}
	return total, dups, afterRevoke
}

// verifyPush checks each registration: the push.deliver jobs with a
// message to it, per seq, against the events of its spaces (its row of the
// jobs table), then its messages (the jobs' states, the answers recorded in
// push_sends and what the push service decrypted) against each other; and
// what the push service itself saw.
func (h *harness) verifyPush(ctx context.Context, spaceSeqs map[string][]int64) (*consumerFindings, error) {
	regs, err := h.registrations(ctx, spaceSeqs)
	if err != nil {
		return nil, err
	}
	f := &consumerFindings{deliveries: &report{}}
	var delRows [][]string
	for _, g := range regs {
		row, found := g.checkJobs()
		f.jobRows = append(f.jobRows, row)
		f.deliveries.add(found)
		row, found, missing := g.checkMessages()
		delRows = append(delRows, row)
		f.deliveries.add(found)
		f.missing += missing
	}
	f.deliveries.add(h.checkPushService())
	f.deliveries.table("PUSH DELIVERIES (per message: one event to one device; a job's state is that of the job carrying it)",
		"device\tprincipal\tspaces\tcompleted\tcancelled\tother\trecorded 2xx\tmessages\tdistinct seqs\tnot-arrived\tnot-done\tafter-revoke\twithout-job\tunrecorded", delRows)
	return f, nil
}

// registrations reads the final state of every device's registration.
func (h *harness) registrations(ctx context.Context, spaceSeqs map[string][]int64) ([]*registration, error) {
	jobs, err := h.pushJobs(ctx)
	if err != nil {
		return nil, err
	}
	sends, err := h.pushSends(ctx)
	if err != nil {
		return nil, err
	}
	h.procMu.Lock()
	revoked, revokedSeq := h.pushRevoked, h.pushRevokedSeq
	h.procMu.Unlock()
	regs := make([]*registration, 0, len(h.devices))
	for _, d := range h.devices {
		g := &registration{d: d, jobs: jobs[d.regID], sends: sends[d.regID], revoked: d.principal == "pu-revoked" && revoked,
			revokedSeq: revokedSeq, msgs: h.pr.messages(d.name), recordLoss: h.recordLossCause}
		for _, s := range d.spaces {
			g.events = append(g.events, spaceSeqs[s]...)
		}
		slices.Sort(g.events)
		regs = append(regs, g)
	}
	return regs, nil
}

// pushJobs reads every push.deliver job and lists it under each of its
// messages, by registration and seq: a batch job once per event and device
// it names, a job of one device (made before batching) once.
func (h *harness) pushJobs(ctx context.Context) (map[uuid.UUID]map[int64][]pushJob, error) {
	rows, err := h.pool.Query(ctx, `SELECT id, state, args FROM river_job WHERE kind = 'push.deliver'`)
	if err != nil {
		return nil, err
	}
	jobs := map[uuid.UUID]map[int64][]pushJob{}
	add := func(reg uuid.UUID, seq int64, j pushJob) {
		if jobs[reg] == nil {
			jobs[reg] = map[int64][]pushJob{}
		}
		jobs[reg][seq] = append(jobs[reg][seq], j)
	}
	var j pushJob
	var raw []byte
	_, err = pgx.ForEachRow(rows, []any{&j.id, &j.state, &raw}, func() error {
		var args push.DeliverArgs
		if err := json.Unmarshal(raw, &args); err != nil {
			return fmt.Errorf("push.deliver job %d: %w", j.id, err)
		}
		if len(args.Events) == 0 {
			add(args.RegistrationID, args.Seq, j)
			return nil
		}
		for _, ev := range args.Events {
			for _, d := range ev.Devices {
				add(d.RegistrationID, ev.Seq, j)
			}
		}
		return nil
	})
	return jobs, err
}

// pushSends reads the final answers recorded in push_sends, by
// registration and seq.
func (h *harness) pushSends(ctx context.Context) (map[uuid.UUID]map[int64]int16, error) {
	rows, err := h.pool.Query(ctx, `SELECT registration_id, event_seq, status FROM push_sends`)
	if err != nil {
		return nil, err
	}
	sends := map[uuid.UUID]map[int64]int16{}
	var reg uuid.UUID
	var seq int64
	var status int16
	_, err = pgx.ForEachRow(rows, []any{&reg, &seq, &status}, func() error {
		if sends[reg] == nil {
			sends[reg] = map[int64]int16{}
		}
		sends[reg][seq] = status
		return nil
	})
	return sends, err
}

// checkJobs checks the jobs with a message to the registration against its
// events and returns its row of the jobs table: exactly one job for every
// event up to upTo, none for another seq, and none for an event committed
// after the revocation.
func (g *registration) checkJobs() ([]string, *report) {
	isEvent := map[int64]bool{}
	for _, e := range g.events {
		isEvent[e] = true
	}
	extra := 0
	for seq := range g.jobs {
		if !isEvent[seq] {
			extra++
		}
	}
	upTo := g.upTo()
	expected, missing := 0, 0
	for _, e := range g.events {
		if e <= upTo {
			expected++
			if g.jobs[e] == nil {
				missing++
			}
		}
	}
	total, dups, afterRevoke := g.jobCounts()
	f := &report{}
	name := g.d.name
	if missing > 0 {
		f.fail("push %s: %d events without a push.deliver job", name, missing)
	}
	if dups > 0 {
		f.fail("push %s: %d duplicate messages in push.deliver jobs for one (registration, seq)", name, dups)
	}
	if extra > 0 {
		f.fail("push %s: %d jobs for events it should not get", name, extra)
	}
	if afterRevoke > 0 {
		f.fail("push %s: %d jobs for events committed after the right was revoked", name, afterRevoke)
	}
	return []string{"push", name, itoa(expected), itoa(total), itoa(dups), itoa(missing), itoa(extra)}, f
}

// messageCounts are what checkMessages found for one registration, per
// message unless said otherwise.
type messageCounts struct {
	states     map[string]int // the states of the jobs carrying its messages
	recorded   int            // with a 2xx in push_sends
	notArrived int            // recorded as sent, or ended unsent, and never arrived
	refused    int            // a final refusal recorded: the soak's push service never refuses
	notDone    int            // carried by a job that did not end
	unrecorded int            // arrived with no 2xx recorded, and no fault explains it
	lostRecord int            // arrived with no 2xx recorded, a fault explains it
	afterRev   int            // arrived, of an event committed after the revocation
	orphan     int            // arrived or recorded seqs without a job
}

// checkMessages checks the registration's messages and returns its row of
// the deliveries table and how many messages should have arrived and did
// not. A message is judged by its job's state and its record in push_sends,
// which the worker writes right after each 2xx: a recorded 2xx arrived; a
// message whose job ended without a record was denied, which only the
// revoked principal's may be; every job ended; nothing arrived for an event
// committed after the revocation or without a job; and every arrival has
// its record, except where a fault between the 2xx and the record explains
// its loss (the one window in which the worker may send a message twice,
// ADR 0031). Duplicate arrivals are the arrivals check's.
func (g *registration) checkMessages() ([]string, *report, int) {
	arrived := map[int64]int{}
	firstAt := map[int64]time.Time{}
	var c messageCounts
	c.states = map[string]int{}
	for _, m := range g.msgs {
		if arrived[m.seq] == 0 {
			firstAt[m.seq] = m.at
		}
		arrived[m.seq]++
		if g.revoked && m.seq > g.revokedSeq {
			c.afterRev++
		}
	}
	for seq, js := range g.jobs {
		done := true
		for _, j := range js {
			c.states[j.state]++
			done = done && j.done()
		}
		status, rec := g.sends[seq]
		switch {
		case !done:
			c.notDone++
		case rec && status/100 == 2:
			c.recorded++
			if arrived[seq] == 0 {
				c.notArrived++
			}
		case rec:
			c.refused++
		case arrived[seq] == 0 && !g.revoked:
			c.notArrived++
		}
	}
	for seq, n := range arrived {
		if g.jobs[seq] == nil {
			c.orphan++
		}
		if status, rec := g.sends[seq]; n > 0 && (!rec || status/100 != 2) {
			if cause := g.recordLoss(firstAt[seq]); cause != "" {
				c.lostRecord++
			} else {
				c.unrecorded++
			}
		}
	}
	for seq := range g.sends {
		if g.jobs[seq] == nil && arrived[seq] == 0 {
			c.orphan++
		}
	}
	return g.messagesRow(&c), g.messagesReport(&c), g.missingMessages(arrived, c.notArrived)
}

// messagesRow is the registration's row of the deliveries table.
func (g *registration) messagesRow(c *messageCounts) []string {
	total, _, afterRevoke := g.jobCounts()
	distinct := map[int64]bool{}
	for _, m := range g.msgs {
		distinct[m.seq] = true
	}
	unrecorded := itoa(c.unrecorded)
	if c.lostRecord > 0 {
		unrecorded = fmt.Sprintf("%d (+%d after a fault)", c.unrecorded, c.lostRecord)
	}
	return []string{g.d.name, g.d.principal, strings.Join(g.d.spaces, ","), itoa(c.states["completed"]),
		itoa(c.states["cancelled"]), itoa(total - c.states["completed"] - c.states["cancelled"]), itoa(c.recorded),
		itoa(len(g.msgs)), itoa(len(distinct)), itoa(c.notArrived + c.refused), itoa(c.notDone), itoa(c.afterRev + afterRevoke),
		itoa(c.orphan), unrecorded}
}

// messagesReport turns the registration's counts into violations.
func (g *registration) messagesReport(c *messageCounts) *report {
	f := &report{}
	name := g.d.name
	if c.notArrived > 0 {
		f.fail("push %s: %d messages recorded as sent, or whose job ended without sending them, never arrived", name, c.notArrived)
	}
	if c.refused > 0 {
		f.fail("push %s: %d messages with a final refusal recorded", name, c.refused)
	}
	if c.notDone > 0 {
		f.fail("push %s: %d messages whose job did not end", name, c.notDone)
	}
	if c.afterRev > 0 {
		f.fail("push %s: %d messages for events committed after the right was revoked", name, c.afterRev)
	}
	if c.orphan > 0 {
		f.fail("push %s: %d messages without a job", name, c.orphan)
	}
	if c.unrecorded > 0 {
		f.fail("push %s: %d messages arrived without a 2xx recorded in push_sends, and no fault came between", name, c.unrecorded)
	}
	return f
}

// missingMessages counts the messages that should have arrived and did
// not: after a revocation, those recorded as sent (notArrived: the others
// may have been denied); otherwise one for every event up to upTo.
func (g *registration) missingMessages(arrived map[int64]int, notArrived int) int {
	if g.revoked {
		return notArrived
	}
	upTo, missing := g.upTo(), 0
	for _, e := range g.events {
		if e <= upTo && arrived[e] == 0 {
			missing++
		}
	}
	return missing
}

// checkPushService checks what the push service itself saw: every request
// passed VAPID and decrypted, and every payload was JSON.
func (h *harness) checkPushService() *report {
	f := &report{}
	if errs := h.pr.rcv.Errors(); len(errs) > 0 {
		f.fail("push: %d requests failed VAPID or decryption, first: %v", len(errs), errs[0])
	}
	h.pr.mu.Lock()
	defer h.pr.mu.Unlock()
	if h.pr.badJSON > 0 {
		f.fail("push: %d decrypted payloads were not JSON", h.pr.badJSON)
	}
	return f
}
