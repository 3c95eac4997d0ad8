package soak

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

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

type key struct {
	id  uuid.UUID
	seq int64
}

func itoa[T ~int | ~int64](n T) string { return fmt.Sprint(n) }

// logEvent is one row of event_log as the checks see it.
type logEvent struct {
	seq   int64
	id    uuid.UUID
	space string
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
	missing := map[string]int{}
	if err := h.verifyWebhooks(ctx, r, head, spaceSeqs, missing); err != nil {
		return nil, err
	}
	if err := h.verifyPush(ctx, r, spaceSeqs, missing); err != nil {
		return nil, err
	}
	dupsByCause := h.arrivalsReport(r, missing)

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
	rows, err := h.pool.Query(ctx, `SELECT seq, id, space FROM event_log ORDER BY seq`)
	if err != nil {
		return 0, nil, err
	}
	var events []logEvent
	for rows.Next() {
		var e logEvent
		if err := rows.Scan(&e.seq, &e.id, &e.space); err != nil {
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
	gaps := 0
	for i, e := range events {
		if e.seq != int64(i+1) {
			gaps++
		}
		inLog[e.id] = true
		idAt[e.seq] = e.id
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

// verifyWebhooks checks delivery rows per (subscription, seq) against the
// events of each subscription's active intervals, the receivers' arrivals
// and the revocation.
func (h *harness) verifyWebhooks(ctx context.Context, r *report, head int64, spaceSeqs map[string][]int64, missingArrivals map[string]int) error {
	status := map[uuid.UUID]string{}
	srows, err := h.pool.Query(ctx, `SELECT id, status FROM webhook_subscriptions`)
	if err != nil {
		return err
	}
	for srows.Next() {
		var id uuid.UUID
		var st string
		if err := srows.Scan(&id, &st); err != nil {
			return err
		}
		status[id] = st
	}
	srows.Close()
	type drow struct {
		seq    int64
		status string
	}
	dels := map[uuid.UUID][]drow{}
	drows, err := h.pool.Query(ctx, `SELECT subscription_id, event_seq, status FROM webhook_deliveries ORDER BY subscription_id, event_seq`)
	if err != nil {
		return err
	}
	for drows.Next() {
		var id uuid.UUID
		var d drow
		if err := drows.Scan(&id, &d.seq, &d.status); err != nil {
			return err
		}
		dels[id] = append(dels[id], d)
	}
	drows.Close()
	dupJobs := map[uuid.UUID]int{}
	jrows, err := h.pool.Query(ctx, `
SELECT (args->>'subscription_id')::uuid, count(*) - 1 FROM river_job WHERE kind = $1
GROUP BY args->>'subscription_id', args->>'seq' HAVING count(*) > 1`, webhooks.KindDeliver)
	if err != nil {
		return err
	}
	for jrows.Next() {
		var id uuid.UUID
		var n int
		if err := jrows.Scan(&id, &n); err != nil {
			return err
		}
		dupJobs[id] += n
	}
	jrows.Close()

	var jobRows, delRows [][]string
	h.procMu.Lock()
	targets := slices.Clone(h.targets)
	h.procMu.Unlock()
	for _, t := range targets {
		t.mu.Lock()
		resumes := slices.Clone(t.resumes)
		revoked, revokedAt, revokedSeq := t.revoked, t.revokedAt, t.revokedSeq
		t.mu.Unlock()
		arrivals, badSig := t.snapshot()
		active := status[t.id] == webhooks.StatusActive
		evs := spaceSeqs[t.space]
		isEvent := map[int64]bool{}
		for _, s := range evs {
			isEvent[s] = true
		}
		have := map[int64]string{}
		extra := 0
		counts := map[string]int{}
		for _, d := range dels[t.id] {
			have[d.seq] = d.status
			counts[d.status]++
			if !isEvent[d.seq] || d.seq <= resumes[0] {
				extra++
			}
		}
		// Each active interval (resume_i, end_i] must have rows for a
		// prefix of its events, the whole of it if it lasts to the end.
		expected, missing := 0, 0
		var lastIntervalFrom int64
		for i, from := range resumes {
			to := head
			if i+1 < len(resumes) {
				to = resumes[i+1]
			}
			last := i == len(resumes)-1
			if last {
				lastIntervalFrom = from
			}
			upTo := from
			for _, s := range evs {
				if s > from && s <= to && have[s] != "" {
					upTo = s
				}
			}
			if last && active {
				upTo = to
			}
			for _, s := range evs {
				if s > from && s <= upTo {
					expected++
					if have[s] == "" {
						missing++
					}
				}
			}
		}
		dups := dupJobs[t.id]
		jobRows = append(jobRows, []string{"webhooks", t.name, itoa(expected), itoa(len(dels[t.id])), itoa(dups), itoa(missing), itoa(extra)})
		if missing > 0 {
			r.fail("webhooks %s: %d events without a delivery row", t.name, missing)
		}
		if extra > 0 {
			r.fail("webhooks %s: %d delivery rows for events it should not have", t.name, extra)
		}
		if dups > 0 {
			r.fail("webhooks %s: %d duplicate delivery jobs for one (subscription, seq)", t.name, dups)
		}

		// Arrivals: in seq order, signed, and every delivered row seen with a 2xx.
		outOfOrder := 0
		var maxSeq int64
		got2xx := map[int64]bool{}
		afterRevoke := 0
		for _, a := range arrivals {
			if a.seq < maxSeq {
				outOfOrder++
			}
			maxSeq = max(maxSeq, a.seq)
			if a.status >= 200 && a.status < 300 {
				got2xx[a.seq] = true
			}
			if revoked && (a.seq > revokedSeq || a.at.After(revokedAt.Add(whTimeout+2*time.Second))) {
				afterRevoke++
			}
		}
		neverReceived := 0
		undelivered := 0
		for _, d := range dels[t.id] {
			if d.status == webhooks.DeliveryDelivered && !got2xx[d.seq] {
				neverReceived++
			}
			switch {
			case d.status == webhooks.DeliveryPending && active:
				undelivered++
			case t.name == "revoked-owner":
				if revoked && d.seq > revokedSeq && d.status == webhooks.DeliveryDelivered {
					afterRevoke++
				}
				if !revoked && d.status != webhooks.DeliveryDelivered {
					undelivered++
				}
			case t.name == "gone-410":
				if d.seq > lastIntervalFrom && active && d.status != webhooks.DeliveryDelivered {
					undelivered++
				}
			default:
				if d.status != webhooks.DeliveryDelivered {
					undelivered++
				}
			}
		}
		delRows = append(delRows, []string{t.name, t.space, itoa(len(resumes)), status[t.id], itoa(counts["delivered"]),
			itoa(counts["dead"]), itoa(counts["skipped"]), itoa(counts["pending"]), itoa(len(arrivals)),
			itoa(undelivered), itoa(neverReceived), itoa(outOfOrder), itoa(afterRevoke), itoa(badSig)})
		missingArrivals[chanWebhooks] += undelivered + neverReceived
		if undelivered > 0 {
			r.fail("webhooks %s: %d deliveries not delivered", t.name, undelivered)
		}
		if neverReceived > 0 {
			r.fail("webhooks %s: %d deliveries marked delivered that the receiver never accepted", t.name, neverReceived)
		}
		if outOfOrder > 0 {
			r.fail("webhooks %s: %d requests arrived out of seq order", t.name, outOfOrder)
		}
		if afterRevoke > 0 {
			r.fail("webhooks %s: %d deliveries after the owner's right was revoked", t.name, afterRevoke)
		}
		if badSig > 0 {
			r.fail("webhooks %s: %d requests with a bad signature", t.name, badSig)
		}
	}
	h.webhookJobRows = jobRows
	r.table("WEBHOOK DELIVERIES PER SUBSCRIPTION", "subscription\tspace\tintervals\tstatus\tdelivered\tdead\tskipped\tpending\trequests\tundelivered\tnever-received\tout-of-order\tafter-revoke\tbad-sig", delRows)
	return nil
}

// verifyPush checks push.deliver jobs per (registration, seq) and the
// decrypted messages.
func (h *harness) verifyPush(ctx context.Context, r *report, spaceSeqs map[string][]int64, missingArrivals map[string]int) error {
	jobs := map[key][]string{}
	rows, err := h.pool.Query(ctx, `
SELECT (args->>'registration_id')::uuid, (args->>'seq')::bigint, state FROM river_job WHERE kind = 'push.deliver'`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k key
		var st string
		if err := rows.Scan(&k.id, &k.seq, &st); err != nil {
			return err
		}
		jobs[k] = append(jobs[k], st)
	}
	rows.Close()
	h.procMu.Lock()
	revoked, revokedSeq := h.pushRevoked, h.pushRevokedSeq
	h.procMu.Unlock()

	jobRows := h.webhookJobRows
	var delRows [][]string
	for _, d := range h.devices {
		isRevoked := d.principal == "pu-revoked" && revoked
		var evs []int64
		for _, s := range d.spaces {
			evs = append(evs, spaceSeqs[s]...)
		}
		slices.Sort(evs)
		isEvent := map[int64]bool{}
		for _, s := range evs {
			isEvent[s] = true
		}
		var gotSeqs []int64
		dups, extra, afterRevoke := 0, 0, 0
		states := map[string]int{}
		for k, sts := range jobs {
			if k.id != d.regID {
				continue
			}
			gotSeqs = append(gotSeqs, k.seq)
			dups += len(sts) - 1
			for _, st := range sts {
				states[st]++
			}
			if !isEvent[k.seq] {
				extra++
			}
			if isRevoked && k.seq > revokedSeq {
				afterRevoke++
			}
		}
		has := map[int64]bool{}
		for _, s := range gotSeqs {
			has[s] = true
		}
		upTo := int64(1<<62 - 1)
		if isRevoked {
			upTo = 0
			for _, s := range gotSeqs {
				if s <= revokedSeq {
					upTo = max(upTo, s)
				}
			}
		}
		expected, missing := 0, 0
		for _, s := range evs {
			if s <= upTo {
				expected++
				if !has[s] {
					missing++
				}
			}
		}
		jobRows = append(jobRows, []string{"push", d.name, itoa(expected), itoa(len(gotSeqs) + dups), itoa(dups), itoa(missing), itoa(extra)})
		if missing > 0 {
			r.fail("push %s: %d events without a push.deliver job", d.name, missing)
		}
		if dups > 0 {
			r.fail("push %s: %d duplicate push.deliver jobs for one (registration, seq)", d.name, dups)
		}
		if extra > 0 {
			r.fail("push %s: %d jobs for events it should not get", d.name, extra)
		}
		if afterRevoke > 0 {
			r.fail("push %s: %d jobs for events committed after the right was revoked", d.name, afterRevoke)
		}

		// Deliveries: every completed job's message arrived and decrypted.
		msgs := h.pr.messages(d.name)
		arrived := map[int64]int{}
		msgAfterRevoke := 0
		for _, m := range msgs {
			arrived[m.seq]++
			if isRevoked && m.seq > revokedSeq {
				msgAfterRevoke++
			}
		}
		notArrived, notDone, orphan := 0, 0, 0
		for k, sts := range jobs {
			if k.id != d.regID {
				continue
			}
			for _, st := range sts {
				switch {
				case st == "completed":
					if arrived[k.seq] == 0 {
						notArrived++
					}
				case st == "cancelled" && isRevoked:
				default:
					notDone++
				}
			}
		}
		for s := range arrived {
			if !has[s] {
				orphan++
			}
		}
		if isRevoked {
			missingArrivals[chanPush] += notArrived
		} else {
			for _, s := range evs {
				if s <= upTo && arrived[s] == 0 {
					missingArrivals[chanPush]++
				}
			}
		}
		delRows = append(delRows, []string{d.name, d.principal, strings.Join(d.spaces, ","), itoa(states["completed"]),
			itoa(states["cancelled"]), itoa(len(gotSeqs) + dups - states["completed"] - states["cancelled"]),
			itoa(len(msgs)), itoa(len(arrived)), itoa(notArrived), itoa(notDone), itoa(msgAfterRevoke + afterRevoke), itoa(orphan)})
		if notArrived > 0 {
			r.fail("push %s: %d completed jobs whose message never arrived", d.name, notArrived)
		}
		if notDone > 0 {
			r.fail("push %s: %d jobs not completed", d.name, notDone)
		}
		if msgAfterRevoke > 0 {
			r.fail("push %s: %d messages for events committed after the right was revoked", d.name, msgAfterRevoke)
		}
		if orphan > 0 {
			r.fail("push %s: %d messages without a job", d.name, orphan)
		}
	}
	if errs := h.pr.rcv.Errors(); len(errs) > 0 {
		r.fail("push: %d requests failed VAPID or decryption, first: %v", len(errs), errs[0])
	}
	h.pr.mu.Lock()
	if h.pr.badJSON > 0 {
		r.fail("push: %d decrypted payloads were not JSON", h.pr.badJSON)
	}
	h.pr.mu.Unlock()
	// The jobs table comes first: it is the exactly-once check.
	r.sections = append(r.sections, "")
	copy(r.sections[2:], r.sections[1:])
	jr := &report{}
	jr.table("JOBS PER CONSUMER PER TARGET AND EVENT (exactly once)", "consumer\ttarget\texpected\tgot\tduplicates\tmissing\textra", jobRows)
	r.sections[1] = jr.sections[0]
	r.table("PUSH DELIVERIES", "device\tprincipal\tspaces\tcompleted\tcancelled\tother\tmessages\tdistinct seqs\tnot-arrived\tnot-done\tafter-revoke\twithout-job", delRows)
	return nil
}
