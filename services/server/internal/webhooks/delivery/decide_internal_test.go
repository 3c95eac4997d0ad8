package delivery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// TestDecide: what a step's record and the rows it claimed mean, for
// every kind of outcome, without a database.
func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	ev := &sync.Event{}
	item := func(nextAt *time.Time, withEvent bool) *delivery {
		d := &delivery{nextAt: nextAt}
		if withEvent {
			d.ev = ev
		}
		return d
	}
	// base is a step of an active subscription whose lease is this
	// sender's, with the last batch recorded and a slice to spare.
	base := func() stepState {
		return stepState{found: true, mine: true, leaseLive: true, recorded: true, active: true, now: now, sliceLeft: time.Second}
	}
	claimed := func(st stepState, items ...*delivery) stepState {
		st.claimed, st.items = true, items
		return st
	}
	read := func(st stepState, allowed bool) stepState {
		st.read, st.allowed = true, allowed
		return st
	}
	unordered := func(st stepState) stepState { st.unordered = true; return st }
	for _, c := range []struct {
		name string
		st   func() stepState
		want outcome
	}{
		{"Deleted", func() stepState { return stepState{} }, outcome{kind: outGone}},
		{"AnotherLiveSender", func() stepState { st := base(); st.mine = false; return st }, outcome{kind: outTakenOver}},
		{"AnotherLiveSenderAfterTheRecord", func() stepState { st := base(); st.mine, st.recorded = false, true; return st },
			outcome{kind: outTakenOver}},
		{"ALeaseRunOutIsTaken", func() stepState { st := base(); st.mine, st.leaseLive, st.recorded = false, false, false; return st },
			outcome{kind: outRecord}},
		{"NotYetRecorded", func() stepState { st := base(); st.recorded = false; return st }, outcome{kind: outRecord}},
		{"Disabled", func() stepState { st := base(); st.active = false; return st }, outcome{kind: outRelease}},
		{"Throttled", func() stepState { st := base(); st.throttleWait = 30 * time.Millisecond; return st },
			outcome{kind: outHold, wait: 30 * time.Millisecond}},
		{"Claim", base, outcome{kind: outClaim}},
		{"NothingPending", func() stepState { return claimed(base()) }, outcome{kind: outIdle}},
		{"UnorderedNothingDueFindsTheNext", func() stepState { return claimed(unordered(base())) }, outcome{kind: outFindDue}},
		{"UnorderedNothingPending", func() stepState {
			st := claimed(unordered(base()))
			st.dueRead = true
			return st
		}, outcome{kind: outIdle}},
		{"UnorderedRetryWithinTheSlice", func() stepState {
			st := claimed(unordered(base()))
			st.dueRead, st.due = true, at(200*time.Millisecond)
			return st
		}, outcome{kind: outHold, wait: 200 * time.Millisecond, wakeable: true}},
		{"UnorderedRetryPastTheSlice", func() stepState {
			st := claimed(unordered(base()))
			st.dueRead, st.due = true, at(time.Minute)
			return st
		}, outcome{kind: outIdle, wait: time.Minute}},
		{"OrderedHeadWaitsForItsRetry", func() stepState { return claimed(base(), item(at(time.Second), false)) },
			outcome{kind: outHold, wait: time.Second}},
		{"SliceUsedUp", func() stepState {
			st := claimed(base(), item(nil, false))
			st.sliceLeft = 0
			return st
		}, outcome{kind: outYield}},
		{"ARetryDueIsSent", func() stepState { return claimed(base(), item(at(-time.Second), false)) }, outcome{kind: outRead}},
		{"Read", func() stepState { return claimed(base(), item(nil, false), item(nil, false)) }, outcome{kind: outRead}},
		{"Refused", func() stepState { return read(claimed(base(), item(nil, true)), false) }, outcome{kind: outRefuse}},
		{"Send", func() stepState { return read(claimed(base(), item(nil, true), item(nil, true)), true) }, outcome{kind: outSend, n: 2}},
		{"GapAtTheHead", func() stepState { return read(claimed(base(), item(nil, false), item(nil, true)), true) },
			outcome{kind: outGap, n: 0}},
		{"GapBehindTheHeadIsTheNextBatchs", func() stepState {
			return read(claimed(base(), item(nil, true), item(nil, true), item(nil, false)), true)
		}, outcome{kind: outSend, n: 2}},
		{"UnorderedGapAnywhere", func() stepState {
			return read(claimed(unordered(base()), item(nil, true), item(nil, false)), true)
		}, outcome{kind: outGap, n: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := c.st()
			require.Equal(t, c.want, decide(&st), "got %v", decide(&st).kind)
		})
	}
}
