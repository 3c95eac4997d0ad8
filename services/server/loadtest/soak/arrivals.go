package soak

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// Channels of arrivals.
const (
	chanWebhooks = "webhooks"
	chanPush     = "push"
)

// noFault names duplicates that no process or database fault explains.
const noFault = "no fault between the first arrival and the copy"

// duplicate is an arrival of a message its receiver had already accepted:
// a webhook request for a (subscription, seq) that the receiver already
// answered with a 2xx, or a second decrypted push message for a (device,
// seq). Senders record a send right after the 2xx; a fault in between
// (the sender's process killed, its connection cut, PostgreSQL crashed)
// leaves no record, and the message is sent again.
type duplicate struct {
	channel, target string
	seq             int64
	first, again    time.Time
	cause           string // the fault kind, or noFault
	// fault is when the fault it is attributed to began (zero: none).
	fault time.Time
}

// attributionSlack is how long before the accepted arrival its fault may
// have been over: the request was in flight when the sender was killed or
// frozen, and the receiver still answered it.
const attributionSlack = time.Second

// duplicateCauses are the faults that can come between a 2xx and its
// record: the sender's process dies, its connections are cut, PostgreSQL
// goes away. (A terminated LISTEN connection only delays wake-ups.)
var duplicateCauses = []string{faultKill, faultTermPool, faultPGCrashQuiet, faultPGCrash}

// duplicates finds every duplicate arrival at the receivers and attributes
// it to the first fault among duplicateCauses that was under way between
// the accepted arrival (less attributionSlack) and the copy: the fault that
// hit the moment between the 2xx and its record. That moment includes the wait
// for a pool connection for the record, which under load can be far longer
// than the insert itself.
func (hi *history) duplicates() []duplicate {
	var out []duplicate
	for _, t := range hi.targets {
		accepted := map[int64]time.Time{}
		for _, a := range t.arrivals {
			if first, ok := accepted[a.seq]; ok {
				out = append(out, duplicate{channel: chanWebhooks, target: t.name, seq: a.seq, first: first, again: a.at})
				continue
			}
			if a.status >= 200 && a.status < 300 {
				accepted[a.seq] = a.at
			}
		}
	}
	for _, d := range hi.devices {
		seen := map[int64]time.Time{}
		for _, m := range d.msgs {
			if first, ok := seen[m.seq]; ok {
				out = append(out, duplicate{channel: chanPush, target: d.name, seq: m.seq, first: first, again: m.at})
				continue
			}
			seen[m.seq] = m.at
		}
	}
	faults := slices.Clone(hi.faultLog)
	slices.SortFunc(faults, func(a, b faultEvent) int { return a.at.Compare(b.at) })
	for i := range out {
		d := &out[i]
		d.cause = noFault
		for _, f := range faults {
			if slices.Contains(duplicateCauses, f.kind) && f.during(d.first.Add(-attributionSlack), d.again) {
				d.cause, d.fault = f.kind, f.at
				break
			}
		}
	}
	return out
}

// during reports whether the fault was under way at some moment from
// from to to.
func (f faultEvent) during(from, to time.Time) bool { return !f.until.Before(from) && !f.at.After(to) }

// recordLossWindow is how long after a push service's 2xx the worker may
// still be writing its record to push_sends: the send log gathers answers
// for a few milliseconds, may first finish writing earlier ones, then
// inserts with push's query timeout (5 s), once more after a foreign key
// conflict.
const recordLossWindow = 15 * time.Second

// recordLossCause names the first fault among duplicateCauses that was
// under way between a message's acceptance (less attributionSlack) and
// recordLossWindow after it, the one that can have lost its record; ""
// when there was none.
func (hi *history) recordLossCause(accepted time.Time) string {
	cause, at := "", time.Time{}
	for _, f := range hi.faultLog {
		if slices.Contains(duplicateCauses, f.kind) && f.during(accepted.Add(-attributionSlack), accepted.Add(recordLossWindow)) &&
			(cause == "" || f.at.Before(at)) {
			cause, at = f.kind, f.at
		}
	}
	return cause
}

// takeoverFigures summarizes the kills: every job and sender claim a killed
// worker held and how soon it was taken over, and for each webhook
// subscription it was sending for whose receiver never fails (healthy-*:
// the others may be in a failure window or revoked, which delays their next
// 2xx whoever sends), how soon the next request reached the receiver with a
// 2xx. Other subscriptions' figures are listed per kill, not summarized.
func (hi *history) takeoverFigures() (jobs, nextDelivery []time.Duration, never int, rows [][]string) {
	tos := slices.Clone(hi.takeovers)
	slices.SortFunc(tos, func(a, b takeover) int { return a.at.Compare(b.at) })
	byID := hi.targetsByID()
	for _, to := range tos {
		k := countHeld(to)
		k.nextDeliveries(to, byID)
		never += k.never
		jobs = append(jobs, k.took...)
		nextDelivery = append(nextDelivery, k.next...)
		rows = append(rows, k.row(to, hi.start))
	}
	return jobs, nextDelivery, never, rows
}

// targetsByID is the webhook targets by subscription id.
func (hi *history) targetsByID() map[string]*targetRecord {
	byID := map[string]*targetRecord{}
	for i := range hi.targets {
		byID[hi.targets[i].id.String()] = &hi.targets[i]
	}
	return byID
}

// killFigures is what one kill left and how it was taken over.
type killFigures struct {
	took  []time.Duration // per job or claim taken over
	never int             // jobs and claims not taken over within takeoverLimit
	// nWH, nPush and nClaims count the webhook jobs, push jobs and sender
	// claims held; subs are the webhook subscriptions among them.
	nWH, nPush, nClaims int
	subs                map[string]bool
	// next is how soon each always-healthy subscription got its next 2xx;
	// others the same for the other subscriptions, as text.
	next   []time.Duration
	others []string
}

// countHeld counts what the killed worker held and how soon it was taken
// over.
func countHeld(to takeover) *killFigures {
	k := &killFigures{subs: map[string]bool{}}
	for i, j := range to.jobs {
		if to.took[i] < 0 {
			k.never++
		} else {
			k.took = append(k.took, to.took[i])
		}
		switch j.kind {
		case webhooks.KindDeliver:
			k.nWH++
			k.subs[j.sub.String()] = true
		case kindClaim:
			k.nClaims++
			k.subs[j.sub.String()] = true
		case "push.deliver":
			k.nPush++
		}
	}
	return k
}

// nextDeliveries finds, for every subscription the killed worker held,
// how soon after the kill its receiver answered a request with a 2xx.
func (k *killFigures) nextDeliveries(to takeover, byID map[string]*targetRecord) {
	for sub := range k.subs {
		t := byID[sub]
		if t == nil {
			continue
		}
		for _, a := range t.arrivals {
			if a.at.After(to.at) && a.status >= 200 && a.status < 300 {
				d := a.at.Sub(to.at)
				switch {
				case !strings.HasPrefix(t.name, "healthy-"):
					k.others = append(k.others, fmt.Sprintf("%s %s", t.name, fmtTook(d)))
				case d < takeoverLimit:
					k.next = append(k.next, d)
				}
				break
			}
		}
	}
	slices.Sort(k.others)
}

// row is the kill's line of the takeover table; start is the run's start.
func (k *killFigures) row(to takeover, start time.Time) []string {
	worst, worstNext := "-", "-"
	if len(k.took) > 0 {
		worst = fmtTook(slices.Max(k.took))
	}
	if len(k.took) < len(to.jobs) {
		worst = fmtTook(-1)
	}
	if len(k.next) > 0 {
		worstNext = fmtTook(slices.Max(k.next))
	}
	return []string{to.victim, fmt.Sprintf("t+%.1fs", to.at.Sub(start).Seconds()),
		itoa(k.nWH), itoa(k.nPush), itoa(k.nClaims), worst, worstNext, strings.Join(k.others, ", ")}
}

// checkArrivals adds the tables of arrivals, duplicates and takeovers and
// the violations among them: a missing arrival (missing per channel, -1
// when that consumer's checks were hidden), a duplicate that no fault
// explains, a kill whose jobs were not taken over within takeoverLimit.
// Duplicates that a fault explains are expected and only counted.
func (hi *history) checkArrivals(r *report, missing map[string]int) map[string]map[string]int {
	dups := hi.duplicates()
	byCause := map[string]map[string]int{}
	perChannel := map[string]int{}
	var lines []string
	for _, d := range dups {
		if byCause[d.cause] == nil {
			byCause[d.cause] = map[string]int{}
		}
		byCause[d.cause][d.channel]++
		perChannel[d.channel]++
		lines = append(lines, fmt.Sprintf("  %s %s seq %d, accepted at t+%.2fs, again at t+%.2fs (%s)", d.channel, d.target, d.seq,
			d.first.Sub(hi.start).Seconds(), d.again.Sub(hi.start).Seconds(), d.cause))
	}
	var rows [][]string
	for _, ch := range []string{chanWebhooks, chanPush} {
		rows = append(rows, []string{ch, itoa(missing[ch]), itoa(perChannel[ch]), itoa(byCause[noFault][ch])})
		if missing[ch] < 0 {
			r.hide(ch+": the arrivals due are unknown: its consumer's tables were not read", checkArrived)
		}
		if missing[ch] > 0 {
			r.fail(checkArrived, "%s: %d messages that should have arrived did not", ch, missing[ch])
		}
		if n := byCause[noFault][ch]; n > 0 {
			r.fail(checkDuplicates, "%s: %d duplicate arrivals with no process or database fault between the first arrival and the copy", ch, n)
		}
	}
	r.table("ARRIVALS AT THE RECEIVERS (duplicates: a copy of a message already accepted; missing -1: not checked)",
		"channel\tmissing\tduplicate arrivals\tof them without a fault", rows)
	if prows := repeatsPerFault(dups, hi.start); len(prows) > 0 {
		r.table("REPEATS PER FAULT (per target: webhook subscription or push device; times from the fault's start; "+
			"accepted before: how long before the fault the earliest repeated message was first accepted)",
			"fault\tat\tchannel\trepeats\ttargets\tmost for one target\tfirst again after\tlast again after\taccepted before", prows)
	}
	for _, d := range dups {
		if limit, ok := repeatBound(d); ok && d.fault.Sub(d.first) > limit {
			r.fail(checkRepeatBound, "%s %s seq %d was accepted %s before the %s and sent again: more than %s, the bound for that fault",
				d.channel, d.target, d.seq, fmtTook(d.fault.Sub(d.first)), d.cause, limit)
		}
	}
	if len(lines) > 0 {
		r.sections = append(r.sections, "DUPLICATE ARRIVALS\n"+strings.Join(lines, "\n")+"\n")
	}
	hi.checkTakeovers(r)
	return byCause
}

// checkTakeovers adds the takeover table and fails when a job or sender
// claim of a killed worker was not taken over within takeoverLimit.
func (hi *history) checkTakeovers(r *report) {
	jobs, next, never, krows := hi.takeoverFigures()
	pct := func(ds []time.Duration, p float64) string {
		if len(ds) == 0 {
			return "-"
		}
		return fmtTook(percentile(ds, p))
	}
	r.table(fmt.Sprintf("TAKEOVER AFTER SIGKILL (River's rescue_stuck_jobs_after would take 2m; goal p95 < 5s)\n"+
		"jobs and sender claims taken over: %d, p50 %s, p95 %s, max %s; not within %s: %d\n"+
		"next 2xx at the killed sender's always-healthy webhook subscriptions: %d, p50 %s, p95 %s, max %s",
		len(jobs), pct(jobs, .5), pct(jobs, .95), pct(jobs, 1), takeoverLimit, never,
		len(next), pct(next, .5), pct(next, .95), pct(next, 1)),
		"killed\tat\twebhook jobs\tpush jobs\twebhook claims\tall taken over after\tnext healthy webhook 2xx after\tnext 2xx at other subscriptions", krows)
	if never > 0 {
		r.fail(checkTakeover, "%d jobs or sender claims of killed workers were not taken over within %s", never, takeoverLimit)
	}
}

// repeatBound is how long before a crash or kill a message may have been
// accepted and still be sent again: what was in flight, and what was
// answered but not yet recorded. Webhook answers are recorded within
// webhooks' RecordEvery (100 ms), push answers within 5 ms; a database
// crash lets a running batch go on until its rights check fails (1 s).
// Two more seconds are slack for a flush still running on a loaded host.
// Repeats after other faults (a pool termination, which may wait long for
// its backends, a receiver's timeout window, a revoked right) are not
// bounded by this.
func repeatBound(d duplicate) (time.Duration, bool) {
	answered := 100 * time.Millisecond
	if d.channel == chanPush {
		answered = 5 * time.Millisecond
	}
	const slack = 2 * time.Second
	switch d.cause {
	case faultKill:
		return answered + slack, true
	case faultPGCrash, faultPGCrashQuiet:
		return answered + time.Second + slack, true
	}
	return 0, false
}

// repeatsPerFault tabulates the duplicates that faults explain, one row per
// fault and channel: how many, over how many targets, the most for one
// target, how soon after the fault the first and last copies arrived, and
// how long before the fault the earliest repeated message had first been
// accepted (what the sender had seen answered and not recorded).
func repeatsPerFault(dups []duplicate, start time.Time) [][]string {
	type key struct {
		at      time.Time
		kind    string
		channel string
	}
	type tally struct {
		n           int
		perTarget   map[string]int
		first, last time.Duration
		before      time.Duration
	}
	tallies := map[key]*tally{}
	var keys []key
	for _, d := range dups {
		if d.fault.IsZero() {
			continue
		}
		k := key{at: d.fault, kind: d.cause, channel: d.channel}
		t := tallies[k]
		if t == nil {
			t = &tally{perTarget: map[string]int{}, first: d.again.Sub(d.fault), last: d.again.Sub(d.fault)}
			tallies[k] = t
			keys = append(keys, k)
		}
		t.n++
		t.perTarget[d.target]++
		t.first, t.last = min(t.first, d.again.Sub(d.fault)), max(t.last, d.again.Sub(d.fault))
		t.before = max(t.before, d.fault.Sub(d.first))
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.channel, b.channel)
	})
	var rows [][]string
	for _, k := range keys {
		t := tallies[k]
		most := 0
		for _, n := range t.perTarget {
			most = max(most, n)
		}
		rows = append(rows, []string{k.kind, fmt.Sprintf("t+%.2fs", k.at.Sub(start).Seconds()), k.channel, itoa(t.n),
			itoa(len(t.perTarget)), itoa(most), fmtTook(t.first), fmtTook(t.last), fmtTook(max(t.before, 0))})
	}
	return rows
}
