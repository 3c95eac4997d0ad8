package soak

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The product checks, by the names the report and the verifier's tests use.
const (
	checkGapless         = "event log gapless up to the head"
	checkAckedKept       = "acknowledged events in the log at their seq"
	checkRolledBack      = "no event of a rolled-back transaction in the log"
	checkNoPhantom       = "no event in the log that no producer wrote"
	checkOperational     = "operational events about the soak's subscriptions only"
	checkCursors         = "every cursor at the head"
	checkDrained         = "the backlog drained"
	checkProcesses       = "bothy processes started, ran and stopped cleanly"
	checkWHRows          = "webhooks: a delivery row for every event of an active interval"
	checkWHExtraRows     = "webhooks: no delivery row for another event"
	checkWHDupJobs       = "webhooks: one delivery job per (subscription, seq)"
	checkWHDelivered     = "webhooks: every delivery row delivered"
	checkWHAccepted      = "webhooks: every delivered row accepted with a 2xx"
	checkWHOrder         = "webhooks: requests in seq order"
	checkWHRevoked       = "webhooks: nothing sent after a revocation"
	checkWHSignature     = "webhooks: every request signed"
	checkPushJobs        = "push: a job for every event"
	checkPushDupJobs     = "push: one message per (registration, seq) in the jobs"
	checkPushExtraJobs   = "push: no job for another event"
	checkPushJobRevoked  = "push: no job for an event after a revocation"
	checkPushArrived     = "push: every message sent or ended unsent arrived"
	checkPushRefused     = "push: no final refusal recorded"
	checkPushDone        = "push: every job ended"
	checkPushMsgRevoked  = "push: no message for an event after a revocation"
	checkPushOrphan      = "push: no message without a job"
	checkPushRecorded    = "push: every arrival recorded, unless a fault explains it"
	checkPushService     = "push: every request passed VAPID, decrypted and held JSON"
	checkArrived         = "every message that should arrive arrived"
	checkDuplicates      = "no duplicate arrival without a fault"
	checkRepeatBound     = "repeats after a crash or kill within the stated bound"
	checkTakeover        = "a killed worker's jobs taken over"
	checkLateSubscriber  = "a subscription created mid-stream gets what follows"
	checkEnabledResumes  = "an enabled subscription resumes at the head"
	checkTakeoverOfAKill = "takeover after each SIGKILL measured"
)

// underFault names the check a fault kind exercises: bothy's behaviour
// while that fault happens. A fault never injected hides it.
func underFault(kind string) string { return "behaviour under fault " + kind }

// verify reads what the run left behind and checks it.
func (h *harness) verify(ctx context.Context, drained bool, drainTook time.Duration) *report {
	ctx, cancel := context.WithTimeout(ctx, 8*readFor)
	defer cancel()
	return check(h.loadHistory(ctx, drained, drainTook))
}

// check runs every check on hi and reports them in this order: the event
// log against what the producers were told, each consumer's jobs and
// deliveries, the arrivals, the cursors, the faults and the run itself,
// then the harness errors of the run.
func check(hi *history) *report {
	r := &report{}
	r.add(hi.checkEvents())
	wh := hi.checkWebhooks()
	pu := hi.checkPush()
	// The jobs table comes first: it is the exactly-once check.
	r.add(jobsTable(wh, pu))
	r.add(wh.deliveries)
	r.add(pu.deliveries)
	dupsByCause := hi.checkArrivals(r, map[string]int{chanWebhooks: wh.missing, chanPush: pu.missing})
	r.add(hi.checkCursors())
	r.add(hi.checkFaults(dupsByCause))
	r.add(hi.checkRun())
	r.harness = append(r.harness, hi.harnessErrs...)
	return r
}

// readable reports whether every table is read; if not, it hides checks in
// f, naming the tables and their errors.
func (hi *history) readable(f *report, tables []string, checks ...string) bool {
	var missing []string
	for _, t := range tables {
		if err, ok := hi.unread[t]; ok {
			missing = append(missing, fmt.Sprintf("%s: %v", t, err))
		}
	}
	if len(missing) == 0 {
		return true
	}
	f.hide("could not read "+strings.Join(missing, "; "), checks...)
	return false
}

// knownTargets returns the ids of the soak's webhook subscriptions.
func (hi *history) knownTargets() map[uuid.UUID]bool {
	ids := map[uuid.UUID]bool{}
	for _, t := range hi.targets {
		ids[t.id] = true
	}
	return ids
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

// checkCursors checks that every consumer's cursor reached the head.
func (hi *history) checkCursors() *report {
	f := &report{}
	if !hi.readable(f, []string{tableCursors, tableEventLog}, checkCursors) {
		return f
	}
	var rows [][]string
	for _, c := range hi.cursors {
		ok := "yes"
		if c.last != hi.head {
			ok = "NO"
			f.fail(checkCursors, "cursor %s at %d, head %d", c.name, c.last, hi.head)
		}
		rows = append(rows, []string{c.name, itoa(c.last), itoa(hi.head), ok})
	}
	f.table("CURSORS", "consumer\tlast_seq\thead\tat head", rows)
	return f
}

// checkRun checks the run itself: the backlog drained, and no bothy
// process failed to start, exited unexpectedly or stopped uncleanly.
func (hi *history) checkRun() *report {
	f := &report{}
	var misc [][]string
	misc = append(misc, []string{"drained", map[bool]string{true: "yes", false: "NO"}[hi.drained], hi.drainTook.Round(100 * time.Millisecond).String()})
	if !hi.drained {
		f.fail(checkDrained, "the backlog did not drain within %s", hi.drainTimeout)
	}
	for _, p := range hi.problems {
		f.fail(checkProcesses, "%s", firstLine(p))
	}
	misc = append(misc, []string{"bothy process problems (failed starts, unexpected exits, unclean stops, refused appends)", itoa(len(hi.problems)), ""},
		[]string{"bothy processes started", itoa(hi.procsStarted), ""},
		[]string{"harness errors during the run (the soak's own)", itoa(len(hi.harnessErrs)), ""})
	f.table("RUN", "\tvalue\t", misc)
	return f
}

// consumerFindings are what the checks of one consumer found: its rows of
// the jobs table, its deliveries table with the violations of all its
// checks, and how many messages should have arrived at its receivers and
// did not (-1 when its checks were hidden).
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

// target returns the record of the webhook target name, or nil.
func (hi *history) target(name string) *targetRecord {
	for i := range hi.targets {
		if hi.targets[i].name == name {
			return &hi.targets[i]
		}
	}
	return nil
}

// device returns the record of the push device name, or nil.
func (hi *history) device(name string) *deviceRecord {
	i := slices.IndexFunc(hi.devices, func(d deviceRecord) bool { return d.name == name })
	if i < 0 {
		return nil
	}
	return &hi.devices[i]
}
