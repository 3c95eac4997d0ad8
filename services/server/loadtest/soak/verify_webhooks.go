package soak

import (
	"fmt"
	"slices"
	"time"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// deliveryRow is one row of webhook_deliveries as the checks see it.
type deliveryRow struct {
	seq    int64
	status string
}

// subscription is the final state of one target's webhook subscription:
// its status, delivery rows in seq order and delivery jobs beyond one per
// seq in the database, and what the soak and the receiver saw.
type subscription struct {
	t          *targetRecord
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

// webhookChecks are the checks of the webhooks consumer.
var webhookChecks = []string{checkWHRows, checkWHExtraRows, checkWHDupJobs, checkWHDelivered, checkWHAccepted, checkWHOrder,
	checkWHRevoked, checkWHSignature}

// checkWebhooks checks each subscription: its delivery rows against the
// events of its active intervals (its row of the jobs table), then the
// requests at its receiver against the rows and the revocation.
func (hi *history) checkWebhooks() *consumerFindings {
	f := &consumerFindings{deliveries: &report{}}
	if !hi.readable(f.deliveries, []string{tableEventLog, tableSubs, tableDelivery, tableWHJobs}, webhookChecks...) {
		f.missing = -1
		return f
	}
	spaceSeqs, about := seqsBySpace(hi.events), seqsAbout(hi.events)
	var delRows [][]string
	for _, s := range hi.subscriptions() {
		own := about[s.t.id]
		events := slices.DeleteFunc(slices.Clone(spaceSeqs[s.t.space]), func(seq int64) bool { return own[seq] })
		row, found := s.checkRows(events, hi.head)
		f.jobRows = append(f.jobRows, row)
		f.deliveries.add(found)
		row, found, missing := s.checkArrivals()
		delRows = append(delRows, row)
		f.deliveries.add(found)
		f.missing += missing
	}
	f.deliveries.table("WEBHOOK DELIVERIES PER SUBSCRIPTION", "subscription\tspace\tintervals\tstatus\tdelivered\tdead\tskipped\tpending\trequests\tundelivered\tnever-received\tout-of-order\tafter-revoke\tbad-sig", delRows)
	return f
}

// subscriptions joins every target with its subscription's final state.
func (hi *history) subscriptions() []*subscription {
	subs := make([]*subscription, 0, len(hi.targets))
	for i := range hi.targets {
		t := &hi.targets[i]
		subs = append(subs, &subscription{t: t, status: hi.subStatus[t.id], rows: hi.deliveries[t.id], dupJobs: hi.dupDeliveryJobs[t.id],
			resumes: t.resumes, revoked: t.revoked, revokedAt: t.revokedAt, revokedSeq: t.revokedSeq,
			lateAfter: lateAfter(t.revokedAt, hi.freezes), arrivals: t.arrivals, badSig: t.badSig})
	}
	return subs
}

// lateAfter is when a request started later than a sender's timeout after
// a revocation at revokedAt would arrive: a sender that checked the right
// just before the revocation sends within its timeout (whTimeout, and a
// margin), unless it was frozen meanwhile: every freeze that began before
// that moment moves it by how long it lasted after the revocation.
func lateAfter(revokedAt time.Time, freezes []freeze) time.Time {
	freezes = slices.Clone(freezes)
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
		f.fail(checkWHRows, "webhooks %s: %d events without a delivery row", s.t.name, missing)
	}
	if extra > 0 {
		f.fail(checkWHExtraRows, "webhooks %s: %d delivery rows for events it should not have", s.t.name, extra)
	}
	if s.dupJobs > 0 {
		f.fail(checkWHDupJobs, "webhooks %s: %d duplicate delivery jobs for one (subscription, seq)", s.t.name, s.dupJobs)
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
		f.fail(checkWHDelivered, "webhooks %s: %d deliveries not delivered", name, undelivered)
	}
	if neverReceived > 0 {
		f.fail(checkWHAccepted, "webhooks %s: %d deliveries marked delivered that the receiver never accepted", name, neverReceived)
	}
	if outOfOrder > 0 {
		f.fail(checkWHOrder, "webhooks %s: %d requests arrived out of seq order (first: %s)", name, outOfOrder, sc.firstOutOfOrder)
	}
	if afterRevoke > 0 {
		f.fail(checkWHRevoked, "webhooks %s: %d deliveries after the owner's right was revoked (first: %s)", name, afterRevoke, sc.firstAfterRevoke)
	}
	if s.badSig > 0 {
		f.fail(checkWHSignature, "webhooks %s: %d requests with a bad signature", name, s.badSig)
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
// the seqs accepted with a 2xx. A copy of a message already accepted is a
// duplicate, not a request out of order: a sender whose record of the 2xx
// was lost sends from the last recorded one again, in order, and the
// duplicate check judges whether a fault explains it.
func (s *subscription) scanArrivals() arrivalScan {
	sc := arrivalScan{got2xx: map[int64]bool{}}
	var maxSeq int64
	var maxAt time.Time
	for _, a := range s.arrivals {
		if a.seq < maxSeq && !sc.got2xx[a.seq] {
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
