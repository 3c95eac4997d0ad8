package soak

import (
	"fmt"

	"github.com/google/uuid"
)

// eventCounts is how the log compares with what the producers were told.
type eventCounts struct {
	absent     int // acknowledged, not in the log at all
	replaced   int // acknowledged, another event at its seq
	rbFound    int // rolled back on purpose, yet in the log
	doubtFound int // in doubt, and committed after all
	phantom    int // in the log, written by no producer
}

// checkEvents checks that the log is gapless up to the head, that every
// acknowledged event is in it at the seq its producer was told, with its
// id, and that it holds no rolled-back event and none nobody wrote.
func (hi *history) checkEvents() *report {
	f := &report{}
	if !hi.readable(f, []string{tableEventLog}, checkGapless, checkAckedKept, checkRolledBack, checkNoPhantom, checkOperational) {
		return f
	}
	inLog := map[uuid.UUID]bool{}
	idAt := map[int64]uuid.UUID{}
	gaps, operational, strayOps := 0, 0, 0
	known := hi.knownTargets()
	for i, e := range hi.events {
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
	if gaps > 0 || int64(len(hi.events)) != hi.head {
		f.fail(checkGapless, "event log is not gapless 1..%d: %d rows, %d out of place", hi.head, len(hi.events), gaps)
	}
	c := hi.countEvents(inLog, idAt)
	hi.eventsTable(f, &c, operational, strayOps)
	if n := c.absent + c.replaced; n > 0 {
		where := "after recovery"
		if len(hi.crashes) == 0 {
			where = "from the log"
		}
		f.fail(checkAckedKept, "acknowledged events missing %s: %d of %d (%d absent, %d with another event at their seq)",
			where, n, len(hi.acked), c.absent, c.replaced)
	}
	if c.rbFound > 0 {
		f.fail(checkRolledBack, "%d events of rolled-back transactions are in the log", c.rbFound)
	}
	if c.phantom > 0 {
		f.fail(checkNoPhantom, "%d events in the log were never written", c.phantom)
	}
	if strayOps > 0 {
		f.fail(checkOperational, "%d operational events about no subscription of the soak", strayOps)
	}
	return f
}

// eventsTable adds the events table to f.
func (hi *history) eventsTable(f *report, c *eventCounts, operational, strayOps int) {
	f.table("EVENTS", "\tcount", [][]string{
		{"committed (event_log rows, head)", itoa(hi.head)},
		{"acknowledged to producers: EventLog.Write / POST events", fmt.Sprintf("%d / %d", len(hi.acked)-hi.ackedHTTP, hi.ackedHTTP)},
		{"acknowledged, missing: absent / another event at its seq", fmt.Sprintf("%d / %d", c.absent, c.replaced)},
		{"in doubt (a fault hit the write) / of them committed", fmt.Sprintf("%d / %d", len(hi.doubt), c.doubtFound)},
		{"rolled back on purpose: txs before append / at commit", fmt.Sprintf("%d / %d", hi.rbBefore, hi.rbAtCommit)},
		{"rolled-back events found in the log", itoa(c.rbFound)},
		{"log events no producer wrote", itoa(c.phantom)},
		{"operational events bothy appended / of them about no soak subscription", fmt.Sprintf("%d / %d", operational, strayOps)},
	})
}

// countEvents compares the log (its ids, and the id at each seq) with the
// producers' records. An acknowledged event absent from the log was lost;
// another event at its seq means the seq was handed out again.
func (hi *history) countEvents(inLog map[uuid.UUID]bool, idAt map[int64]uuid.UUID) eventCounts {
	var c eventCounts
	for id, seq := range hi.acked {
		switch at, ok := idAt[seq]; {
		case !ok:
			c.absent++
		case at != id:
			c.replaced++
		}
	}
	for id := range hi.rolledBack {
		if inLog[id] {
			c.rbFound++
		}
	}
	for id := range hi.doubt {
		if inLog[id] {
			c.doubtFound++
		}
	}
	for id := range inLog {
		if _, ok := hi.acked[id]; !ok && !hi.doubt[id] {
			c.phantom++
		}
	}
	return c
}
