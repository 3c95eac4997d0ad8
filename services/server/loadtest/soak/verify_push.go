package soak

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// registration is the final state of one device's push registration: the
// push.deliver jobs that carry a message to it, the final answers recorded
// for it in push_sends, the events of its spaces, and the messages the push
// service decrypted for it.
type registration struct {
	d          *deviceRecord
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

// pushChecks are the checks of the push consumer.
var pushChecks = []string{checkPushJobs, checkPushDupJobs, checkPushExtraJobs, checkPushJobRevoked, checkPushArrived, checkPushRefused,
	checkPushDone, checkPushMsgRevoked, checkPushOrphan, checkPushRecorded}

// checkPush checks each registration: the push.deliver jobs with a
// message to it, per seq, against the events of its spaces (its row of the
// jobs table), then its messages (the jobs' states, the answers recorded in
// push_sends and what the push service decrypted) against each other; and
// what the push service itself saw.
func (hi *history) checkPush() *consumerFindings {
	f := &consumerFindings{deliveries: &report{}}
	f.deliveries.add(hi.checkPushService())
	if !hi.readable(f.deliveries, []string{tableEventLog, tablePushJobs, tablePushSends}, pushChecks...) {
		f.missing = -1
		return f
	}
	var delRows [][]string
	for _, g := range hi.registrations() {
		row, found := g.checkJobs()
		f.jobRows = append(f.jobRows, row)
		f.deliveries.add(found)
		row, found, missing := g.checkMessages()
		delRows = append(delRows, row)
		f.deliveries.add(found)
		f.missing += missing
	}
	f.deliveries.table("PUSH DELIVERIES (per message: one event to one device; a job's state is that of the job carrying it)",
		"device\tprincipal\tspaces\tcompleted\tcancelled\tother\trecorded 2xx\tmessages\tdistinct seqs\tnot-arrived\tnot-done\tafter-revoke\twithout-job\tunrecorded", delRows)
	return f
}

// registrations joins every device with its registration's final state.
func (hi *history) registrations() []*registration {
	spaceSeqs := seqsBySpace(hi.events)
	regs := make([]*registration, 0, len(hi.devices))
	for i := range hi.devices {
		d := &hi.devices[i]
		g := &registration{d: d, jobs: hi.pushJobs[d.regID], sends: hi.pushSends[d.regID], revoked: d.principal == "pu-revoked" && hi.pushRevoked,
			revokedSeq: hi.pushRevokedSeq, msgs: d.msgs, recordLoss: hi.recordLossCause}
		for _, s := range d.spaces {
			g.events = append(g.events, spaceSeqs[s]...)
		}
		slices.Sort(g.events)
		regs = append(regs, g)
	}
	return regs
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
		f.fail(checkPushJobs, "push %s: %d events without a push.deliver job", name, missing)
	}
	if dups > 0 {
		f.fail(checkPushDupJobs, "push %s: %d duplicate messages in push.deliver jobs for one (registration, seq)", name, dups)
	}
	if extra > 0 {
		f.fail(checkPushExtraJobs, "push %s: %d jobs for events it should not get", name, extra)
	}
	if afterRevoke > 0 {
		f.fail(checkPushJobRevoked, "push %s: %d jobs for events committed after the right was revoked", name, afterRevoke)
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
// its loss (the one window in which the worker may send a message
// twice). Duplicate arrivals are the arrivals check's.
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
		case rec && (status/100 == 2 || status < 100):
			// A 2xx, or a request that got no answer (status 0, or 1 when its
			// one more try got none either): the message may have arrived, and
			// the soak's push service answers everything it gets.
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
		if status, rec := g.sends[seq]; n > 0 && (!rec || (status/100 != 2 && status >= 100)) {
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
		f.fail(checkPushArrived, "push %s: %d messages recorded as sent, or whose job ended without sending them, never arrived", name, c.notArrived)
	}
	if c.refused > 0 {
		f.fail(checkPushRefused, "push %s: %d messages with a final refusal recorded", name, c.refused)
	}
	if c.notDone > 0 {
		f.fail(checkPushDone, "push %s: %d messages whose job did not end", name, c.notDone)
	}
	if c.afterRev > 0 {
		f.fail(checkPushMsgRevoked, "push %s: %d messages for events committed after the right was revoked", name, c.afterRev)
	}
	if c.orphan > 0 {
		f.fail(checkPushOrphan, "push %s: %d messages without a job", name, c.orphan)
	}
	if c.unrecorded > 0 {
		f.fail(checkPushRecorded, "push %s: %d messages arrived without a 2xx recorded in push_sends, and no fault came between", name, c.unrecorded)
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
func (hi *history) checkPushService() *report {
	f := &report{}
	if errs := hi.pushErrors; len(errs) > 0 {
		f.fail(checkPushService, "push: %d requests failed VAPID or decryption, first: %v", len(errs), errs[0])
	}
	if hi.pushBadJSON > 0 {
		f.fail(checkPushService, "push: %d decrypted payloads were not JSON", hi.pushBadJSON)
	}
	return f
}
