package soak

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// t0 is the start of every crafted run.
var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// at is the moment s seconds into a crafted run.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// Crafted runs have eleven events: the odd seqs in spaceA, the even ones in
// spaceB, and seq 11 an operational event about gone-410 in spaceA. The
// faults come in the first seconds; the arrivals from 20 s on, after the
// window in which a fault explains a lost push record.
const (
	craftedHead     = 11
	operationalSeq  = 11
	revokedSeq      = 6 // the head read after both revocations
	revokedAtSecond = 40
)

func eventID(seq int64) uuid.UUID { return uuid.NewMD5(uuid.Nil, []byte(fmt.Sprint(seq))) }

func spaceOf(seq int64) string {
	if seq%2 == 1 {
		return spaceA
	}
	return spaceB
}

// cleanHistory is a short-mode run that passes every check: each kind of
// fault happened with its effect, gone-410 was disabled and enabled after
// seq 5, revoked-owner and pu-revoked lost their right at head 6.
func cleanHistory() *history {
	hi := &history{start: t0, short: true, drainTimeout: time.Minute, drained: true, drainTook: time.Second, procsStarted: 5,
		unread: map[string]error{}, head: craftedHead, subStatus: map[uuid.UUID]string{}, deliveries: map[uuid.UUID][]deliveryRow{},
		dupDeliveryJobs: map[uuid.UUID]int{}, pushJobs: map[uuid.UUID]map[int64][]pushJob{}, pushSends: map[uuid.UUID]map[int64]int16{},
		acked: map[uuid.UUID]int64{}, doubt: map[uuid.UUID]bool{}, rolledBack: map[uuid.UUID]bool{},
		cursors: []cursorRow{{"push", craftedHead}, {"webhooks", craftedHead}}}
	craftTargets(hi)
	for seq := int64(1); seq <= craftedHead; seq++ {
		e := logEvent{seq: seq, id: eventID(seq), space: spaceOf(seq)}
		if seq == operationalSeq {
			e.operational, e.about = true, hi.target("gone-410").id
		} else {
			hi.acked[e.id] = seq
		}
		hi.events = append(hi.events, e)
	}
	craftWebhooks(hi)
	craftPush(hi)
	craftFaults(hi)
	return hi
}

func craftTargets(hi *history) {
	for _, t := range []struct{ name, space string }{
		{"healthy-a", spaceA}, {"flaky-5xx", spaceA}, {"gone-410", spaceA}, {"slow-timeout", spaceB}, {"revoked-owner", spaceB},
	} {
		hi.targets = append(hi.targets, targetRecord{name: t.name, space: t.space, owner: "owner-a", id: uuid.NewMD5(uuid.Nil, []byte(t.name)),
			resumes: []int64{0}})
	}
	g := hi.target("gone-410")
	g.resumes = append(g.resumes, 5)
	r := hi.target("revoked-owner")
	r.owner, r.revoked, r.revokedAt, r.revokedSeq = "owner-r", true, at(revokedAtSecond), revokedSeq
}

// craftWebhooks gives every subscription its rows and its receiver its
// requests: each event of its space delivered and accepted in seq order,
// except gone-410's first interval (seq 1 answered 410, rows skipped at the
// enable) and revoked-owner's events after the revocation (dead, never
// sent). flaky-5xx and slow-timeout answered their first request with the
// fault and accepted the retry.
func craftWebhooks(hi *history) {
	for i := range hi.targets {
		t := &hi.targets[i]
		hi.subStatus[t.id] = webhooks.StatusActive
		for _, e := range hi.events {
			if e.space != t.space || (e.operational && e.about == t.id) {
				continue
			}
			row, arrives := deliveryRow{seq: e.seq, status: webhooks.DeliveryDelivered}, true
			switch {
			case t.name == "gone-410" && e.seq <= 5:
				row.status, arrives = webhooks.DeliverySkipped, false
			case t.name == "revoked-owner" && e.seq > revokedSeq:
				row.status, arrives = webhooks.DeliveryDead, false
			}
			hi.deliveries[t.id] = append(hi.deliveries[t.id], row)
			if arrives {
				t.arrivals = append(t.arrivals, arrival{seq: e.seq, at: at(20 + float64(e.seq)), status: 204})
			}
		}
	}
	faulty := func(name string, seq int64, status int) {
		t := hi.target(name)
		t.arrivals = append([]arrival{{seq: seq, at: at(19), status: status}}, t.arrivals...)
		t.faultResp = 1
	}
	faulty("flaky-5xx", 1, 503)
	faulty("slow-timeout", 2, 0)
	faulty("gone-410", 1, 410)
}

// craftPush registers three devices: pu-1-phone in both spaces,
// pu-flaky-phone in spaceB (one 503 answered), pu-revoked-phone in spaceA
// (revoked at head 6). Every event of a device's spaces has a completed
// job, a recorded 201 and one decrypted message, up to the revocation.
func craftPush(hi *history) {
	hi.pushRevoked, hi.pushRevokedSeq = true, revokedSeq
	for _, d := range []deviceRecord{
		{name: "pu-1-phone", principal: "pu-1", spaces: []string{spaceA, spaceB}},
		{name: "pu-flaky-phone", principal: "pu-flaky", spaces: []string{spaceB}, faultResp: 1},
		{name: "pu-revoked-phone", principal: "pu-revoked", spaces: []string{spaceA}},
	} {
		d.regID = uuid.NewMD5(uuid.Nil, []byte(d.name))
		hi.pushJobs[d.regID], hi.pushSends[d.regID] = map[int64][]pushJob{}, map[int64]int16{}
		for _, e := range hi.events {
			if !slices.Contains(d.spaces, e.space) || (d.principal == "pu-revoked" && e.seq > revokedSeq) {
				continue
			}
			hi.pushJobs[d.regID][e.seq] = []pushJob{{id: e.seq, state: "completed"}}
			hi.pushSends[d.regID][e.seq] = 201
			d.msgs = append(d.msgs, pushMessage{seq: e.seq, at: at(20 + float64(e.seq))})
		}
		hi.devices = append(hi.devices, d)
	}
}

// craftFaults records one fault of each kind a short run needs, in its
// first seconds, a kill whose one job was taken over after a second, and
// the crash with the workers frozen.
func craftFaults(hi *history) {
	hi.faults = map[string]faultCount{}
	for _, k := range []string{faultKill, faultPGCrashQuiet, faultRevokeWH, faultRevokePush, faultWH5xx, faultWHTimeout, faultWH410, faultPush5xx} {
		hi.faults[k] = faultCount{n: 1}
	}
	hi.faults[faultTermPool] = faultCount{n: 1, x: 4}
	hi.faults[faultTermListen] = faultCount{n: 1, x: 3}
	hi.faultLog = []faultEvent{{faultKill, at(2), at(2.1)}, {faultTermPool, at(3), at(3.2)}, {faultTermListen, at(3.5), at(3.6)},
		{faultPGCrashQuiet, at(3), at(4.5)}}
	hi.takeovers = []takeover{{victim: "worker-1", at: at(2), jobs: []heldJob{{id: 1, kind: webhooks.KindDeliver, sub: hi.target("healthy-a").id}},
		took: []time.Duration{time.Second}}}
	hi.freezes = []freeze{{from: at(3), to: at(4.5)}}
	hi.crashes = []crashResult{{kind: faultPGCrashQuiet, acked: 3, quiet: 1}}
}

// Helpers that change one part of a crafted history.

func (hi *history) dropRow(name string, seq int64) {
	id := hi.target(name).id
	hi.deliveries[id] = slices.DeleteFunc(hi.deliveries[id], func(d deliveryRow) bool { return d.seq == seq })
}

func (hi *history) setRow(name string, seq int64, status string) {
	id := hi.target(name).id
	for i := range hi.deliveries[id] {
		if hi.deliveries[id][i].seq == seq {
			hi.deliveries[id][i].status = status
		}
	}
}

func (t *targetRecord) dropArrival(seq int64) {
	t.arrivals = slices.DeleteFunc(t.arrivals, func(a arrival) bool { return a.seq == seq })
}

func (hi *history) reg(name string) uuid.UUID { return hi.device(name).regID }

func (d *deviceRecord) dropMessage(seq int64) {
	d.msgs = slices.DeleteFunc(d.msgs, func(m pushMessage) bool { return m.seq == seq })
}

// TestCheck_CleanHistoryPasses: the crafted run, in which every promise
// holds and every fault happened, passes with no harness error.
func TestCheck_CleanHistoryPasses(t *testing.T) {
	t.Parallel()
	r := check(cleanHistory())
	require.True(t, r.passed(), r.String())
	require.Empty(t, r.harness, r.String())
	require.Contains(t, r.String(), "PASS:")
}

// checkCase is one crafted history: a change to the clean one, the product
// checks it must fail and the checks it must leave hidden. A case that
// names neither must pass.
type checkCase struct {
	name   string
	mutate func(hi *history)
	fails  []string
	hides  []string
}

// runCheckCases runs each case on a fresh clean history.
func runCheckCases(t *testing.T, cases []checkCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hi := cleanHistory()
			tc.mutate(hi)
			r := check(hi)
			require.ElementsMatch(t, tc.fails, r.failedChecks(), "failed checks\n%s", r)
			require.ElementsMatch(t, tc.hides, r.hidden(), "hidden checks\n%s", r)
			require.Equal(t, len(tc.fails) == 0 && len(tc.hides) == 0, r.passed(), r.String())
		})
	}
}

// TestCheck_EventLog: the log against what the producers were told.
func TestCheck_EventLog(t *testing.T) {
	t.Parallel()
	runCheckCases(t, []checkCase{
		{"GapBelowTheHead", func(hi *history) {
			hi.head++
			for i := range hi.cursors {
				hi.cursors[i].last++
			}
		}, []string{checkGapless}, nil},
		{"AcknowledgedEventAbsent", func(hi *history) { hi.acked[uuid.New()] = 99 }, []string{checkAckedKept}, nil},
		{"AcknowledgedSeqHandedOutAgain", func(hi *history) { hi.acked[uuid.New()] = 5 }, []string{checkAckedKept}, nil},
		{"RolledBackEventInTheLog", func(hi *history) { hi.rolledBack[eventID(3)] = true }, []string{checkRolledBack}, nil},
		{"EventNobodyWrote", func(hi *history) { delete(hi.acked, eventID(3)) }, []string{checkNoPhantom}, nil},
		{"InDoubtEventCommittedIsFine", func(hi *history) {
			delete(hi.acked, eventID(3))
			hi.doubt[eventID(3)] = true
		}, nil, nil},
		// gone-410 is then owed the event that was about it.
		{"OperationalEventAboutNoSubscription", func(hi *history) { hi.events[operationalSeq-1].about = uuid.New() },
			[]string{checkOperational, checkWHRows}, nil},
		{"CursorBehindTheHead", func(hi *history) { hi.cursors[0].last-- }, []string{checkCursors}, nil},
	})
}

// TestCheck_Run: the drain and the bothy processes.
func TestCheck_Run(t *testing.T) {
	t.Parallel()
	runCheckCases(t, []checkCase{
		{"BacklogNotDrained", func(hi *history) { hi.drained = false }, []string{checkDrained}, nil},
		{"ProcessExitedOnItsOwn", func(hi *history) { hi.problems = []string{"worker-2 (pid 7) exited on its own"} },
			[]string{checkProcesses}, nil},
		{"KilledWorkersJobNotTakenOver", func(hi *history) { hi.takeovers[0].took[0] = -1 }, []string{checkTakeover}, nil},
	})
}

// TestCheck_Webhooks: each subscription's rows, jobs and requests.
func TestCheck_Webhooks(t *testing.T) {
	t.Parallel()
	runCheckCases(t, []checkCase{
		{"EventWithoutADeliveryRow", func(hi *history) { hi.dropRow("healthy-a", 5) }, []string{checkWHRows}, nil},
		{"RowForAnotherSpacesEvent", func(hi *history) {
			id := hi.target("healthy-a").id
			hi.deliveries[id] = append(hi.deliveries[id], deliveryRow{seq: 2, status: webhooks.DeliveryDelivered})
			t := hi.target("healthy-a")
			t.arrivals = slices.Insert(t.arrivals, 1, arrival{seq: 2, at: at(21.5), status: 204})
		}, []string{checkWHExtraRows}, nil},
		{"TwoDeliveryJobsForOneSeq", func(hi *history) { hi.dupDeliveryJobs[hi.target("healthy-a").id] = 1 },
			[]string{checkWHDupJobs}, nil},
		{"RowLeftPending", func(hi *history) { hi.setRow("healthy-a", 5, webhooks.DeliveryPending) },
			[]string{checkWHDelivered, checkArrived}, nil},
		{"DeliveredRowTheReceiverNeverAccepted", func(hi *history) { hi.target("healthy-a").dropArrival(5) },
			[]string{checkWHAccepted, checkArrived}, nil},
		{"RequestsOutOfSeqOrder", func(hi *history) {
			a := hi.target("healthy-a").arrivals
			a[1].seq, a[2].seq = a[2].seq, a[1].seq
		}, []string{checkWHOrder}, nil},
		{"RequestForAnEventAfterTheRevocation", func(hi *history) {
			t := hi.target("revoked-owner")
			t.arrivals = append(t.arrivals, arrival{seq: 8, at: at(revokedAtSecond + 1), status: 204})
		}, []string{checkWHRevoked}, nil},
		{"RequestStartedLaterThanATimeoutAfterTheRevocation", func(hi *history) {
			t := hi.target("revoked-owner")
			t.arrivals[len(t.arrivals)-1].at = at(revokedAtSecond + 10)
		}, []string{checkWHRevoked}, nil},
		// The workers were frozen for 9 s right after the revocation: a
		// sender that checked the right before it may send that much later.
		{"FreezeAfterTheRevocationStretchesTheBound", func(hi *history) {
			t := hi.target("revoked-owner")
			t.arrivals[len(t.arrivals)-1].at = at(revokedAtSecond + 10)
			hi.freezes = append(hi.freezes, freeze{from: at(revokedAtSecond + 1), to: at(revokedAtSecond + 10)})
		}, nil, nil},
		{"RowDeliveredAfterTheRevocation", func(hi *history) { hi.setRow("revoked-owner", 8, webhooks.DeliveryDelivered) },
			[]string{checkWHRevoked, checkWHAccepted, checkArrived}, nil},
		{"BadSignature", func(hi *history) { hi.target("healthy-a").badSig = 1 }, []string{checkWHSignature}, nil},
		{"DisabledIntervalHoldsAPrefix", func(hi *history) { hi.dropRow("gone-410", 5) }, nil, nil},
		{"DisabledIntervalWithAHole", func(hi *history) { hi.dropRow("gone-410", 3) }, []string{checkWHRows}, nil},
	})
}

// TestCheck_Push: each registration's jobs, records and messages, and
// what the push service saw.
func TestCheck_Push(t *testing.T) {
	t.Parallel()
	runCheckCases(t, []checkCase{
		{"EventWithoutAJob", func(hi *history) { delete(hi.pushJobs[hi.reg("pu-1-phone")], 5) },
			[]string{checkPushJobs, checkPushOrphan}, nil},
		{"TwoJobsWithOneMessage", func(hi *history) {
			js := hi.pushJobs[hi.reg("pu-1-phone")]
			js[5] = append(js[5], pushJob{id: 99, state: "completed"})
		}, []string{checkPushDupJobs}, nil},
		{"JobForAnotherSpacesEvent", func(hi *history) {
			hi.pushJobs[hi.reg("pu-revoked-phone")][2] = []pushJob{{id: 99, state: "cancelled"}}
		}, []string{checkPushExtraJobs}, nil},
		{"JobForAnEventAfterTheRevocation", func(hi *history) {
			hi.pushJobs[hi.reg("pu-revoked-phone")][7] = []pushJob{{id: 99, state: "cancelled"}}
		}, []string{checkPushJobRevoked}, nil},
		{"SentMessageNeverArrived", func(hi *history) { hi.device("pu-1-phone").dropMessage(5) },
			[]string{checkPushArrived, checkArrived}, nil},
		{"FinalRefusalRecorded", func(hi *history) { hi.pushSends[hi.reg("pu-1-phone")][5] = 410 },
			[]string{checkPushRefused, checkPushRecorded}, nil},
		// A request that got no answer is recorded 0 (1 after its one more
		// try): the message may have arrived, and did.
		{"UnansweredRequestThatArrived", func(hi *history) { hi.pushSends[hi.reg("pu-1-phone")][5] = 0 }, nil, nil},
		{"UnansweredTwiceThatArrived", func(hi *history) { hi.pushSends[hi.reg("pu-1-phone")][5] = 1 }, nil, nil},
		{"UnansweredRequestThatNeverArrived", func(hi *history) {
			hi.pushSends[hi.reg("pu-1-phone")][5] = 1
			hi.device("pu-1-phone").dropMessage(5)
		}, []string{checkPushArrived, checkArrived}, nil},
		{"JobNotEnded", func(hi *history) { hi.pushJobs[hi.reg("pu-1-phone")][5][0].state = "available" },
			[]string{checkPushDone}, nil},
		{"MessageForAnEventAfterTheRevocation", func(hi *history) {
			d := hi.device("pu-revoked-phone")
			d.msgs = append(d.msgs, pushMessage{seq: 7, at: at(27)})
		}, []string{checkPushMsgRevoked, checkPushOrphan, checkPushRecorded}, nil},
		{"RecordWithoutAJob", func(hi *history) { hi.pushSends[hi.reg("pu-1-phone")][99] = 201 },
			[]string{checkPushOrphan}, nil},
		{"ArrivalWithoutARecord", func(hi *history) { delete(hi.pushSends[hi.reg("pu-1-phone")], 5) },
			[]string{checkPushRecorded}, nil},
		// A kill right after the answer explains the lost record.
		{"ArrivalWithoutARecordAfterAKill", func(hi *history) {
			delete(hi.pushSends[hi.reg("pu-1-phone")], 5)
			hi.faultLog = append(hi.faultLog, faultEvent{faultKill, at(25.5), at(25.6)})
		}, nil, nil},
		// A termination that waited for its backends from 10 s before the
		// answer to just after it.
		{"ArrivalWithoutARecordDuringALongTermination", func(hi *history) {
			delete(hi.pushSends[hi.reg("pu-1-phone")], 5)
			hi.faultLog = append(hi.faultLog, faultEvent{faultTermPool, at(15), at(25.2)})
		}, nil, nil},
		{"ArrivalWithoutARecordLongAfterAFault", func(hi *history) {
			delete(hi.pushSends[hi.reg("pu-1-phone")], 5)
			hi.faultLog = append(hi.faultLog, faultEvent{faultTermPool, at(15), at(23)})
		}, []string{checkPushRecorded}, nil},
		{"RequestFailedVAPIDOrDecryption", func(hi *history) { hi.pushErrors = []error{errors.New("bad VAPID token")} },
			[]string{checkPushService}, nil},
		{"PayloadNotJSON", func(hi *history) { hi.pushBadJSON = 1 }, []string{checkPushService}, nil},
	})
}

// TestCheck_DuplicateArrivals: a copy of an accepted message needs a
// fault between the two arrivals.
func TestCheck_DuplicateArrivals(t *testing.T) {
	t.Parallel()
	webhookCopy := func(hi *history) {
		t := hi.target("healthy-a")
		last := t.arrivals[len(t.arrivals)-1]
		t.arrivals = append(t.arrivals, arrival{seq: last.seq, at: at(60), status: 204})
	}
	pushCopy := func(hi *history) {
		d := hi.device("pu-1-phone")
		d.msgs = append(d.msgs, pushMessage{seq: craftedHead, at: at(60)})
	}
	between := func(hi *history) { hi.faultLog = append(hi.faultLog, faultEvent{faultTermPool, at(45), at(45.5)}) }
	listenOnly := func(hi *history) { hi.faultLog = append(hi.faultLog, faultEvent{faultTermListen, at(45), at(45.5)}) }
	// The first copy of seq 11 was accepted at 31 s.
	longBefore := func(hi *history) { hi.faultLog = append(hi.faultLog, faultEvent{faultTermPool, at(25), at(29)}) }
	underWay := func(hi *history) { hi.faultLog = append(hi.faultLog, faultEvent{faultTermPool, at(25), at(31.2)}) }
	runCheckCases(t, []checkCase{
		{"WebhookCopyWithoutAFault", webhookCopy, []string{checkDuplicates}, nil},
		{"PushCopyWithoutAFault", pushCopy, []string{checkDuplicates}, nil},
		{"WebhookCopyAfterAPoolTermination", func(hi *history) { webhookCopy(hi); between(hi) }, nil, nil},
		{"PushCopyAfterAPoolTermination", func(hi *history) { pushCopy(hi); between(hi) }, nil, nil},
		// A terminated LISTEN connection delays wake-ups; it cannot lose a
		// record.
		{"CopyAfterAListenTerminationOnly", func(hi *history) { webhookCopy(hi); listenOnly(hi) }, []string{checkDuplicates}, nil},
		{"CopyAfterAFaultOverBeforeTheFirstArrival", func(hi *history) { webhookCopy(hi); longBefore(hi) }, []string{checkDuplicates}, nil},
		{"CopyAfterAFaultUnderWayAtTheFirstArrival", func(hi *history) { webhookCopy(hi); underWay(hi) }, nil, nil},
		// The sender, its record of seqs 9 and 11 lost, sends them again in
		// order: duplicates, not requests out of order.
		{"ResentSuffixAfterAFault", func(hi *history) {
			t := hi.target("healthy-a")
			t.arrivals = append(t.arrivals, arrival{seq: 9, at: at(60), status: 204}, arrival{seq: 11, at: at(60.1), status: 204})
			between(hi)
		}, nil, nil},
		{"ResentSuffixWithoutAFault", func(hi *history) {
			t := hi.target("healthy-a")
			t.arrivals = append(t.arrivals, arrival{seq: 9, at: at(60), status: 204}, arrival{seq: 11, at: at(60.1), status: 204})
		}, []string{checkDuplicates}, nil},
	})
}

// TestCheck_HarnessErrors: the soak's own failures are reported apart from
// bothy's and fail the run only when they hide a check, naming it.
func TestCheck_HarnessErrors(t *testing.T) {
	t.Parallel()
	unread := errors.New("timeout: context deadline exceeded")
	runCheckCases(t, []checkCase{
		// The case that once failed a run: a termination of the soak's own
		// timed out as the load ended; other terminations of its kind
		// happened.
		{"FailedTerminationHidesNothing", func(hi *history) {
			hi.harnessErrs = []harnessError{{text: "terminate LISTEN backends: context canceled"}}
		}, nil, nil},
		{"UnreadDeliveriesHideTheWebhookChecks", func(hi *history) { hi.unread[tableDelivery] = unread },
			nil, append(slices.Clone(webhookChecks), checkArrived)},
		{"UnreadPushJobsHideThePushChecks", func(hi *history) { hi.unread[tablePushJobs] = unread },
			nil, append(slices.Clone(pushChecks), checkArrived)},
		{"UnreadLogHidesEveryCheckOfIt", func(hi *history) { hi.unread[tableEventLog] = unread }, nil,
			append(append([]string{checkGapless, checkAckedKept, checkRolledBack, checkNoPhantom, checkOperational, checkCursors,
				checkArrived}, webhookChecks...), pushChecks...)},
		{"UnreadCursorsHideTheCursorCheck", func(hi *history) { hi.unread[tableCursors] = unread }, nil, []string{checkCursors}},
		{"FaultNeverInjected", func(hi *history) { delete(hi.faults, faultRevokeWH) }, nil, []string{underFault(faultRevokeWH)}},
		{"PlannedCrashNeverInjected", func(hi *history) { delete(hi.faults, faultPGCrashQuiet); hi.crashes = nil },
			nil, []string{underFault(faultPGCrashQuiet)}},
		{"CrashNotPlanned", func(hi *history) {
			delete(hi.faults, faultPGCrashQuiet)
			hi.crashes, hi.crashSkipped = nil, "--pg-crash off"
		}, nil, nil},
		{"TerminationsFoundNoBackend", func(hi *history) { hi.faults[faultTermListen] = faultCount{n: 2} },
			nil, []string{underFault(faultTermListen)}},
		{"ReceiverNeverAnsweredWithTheFault", func(hi *history) { hi.target("flaky-5xx").faultResp = 0 },
			nil, []string{underFault(faultWH5xx)}},
		{"HarnessErrorThatHidesACheck", func(hi *history) {
			hi.harnessErrs = []harnessError{{text: "create late subscription: timeout", hides: []string{checkLateSubscriber}}}
		}, nil, []string{checkLateSubscriber}},
		{"ViolationAndHiddenCheckBothReported", func(hi *history) {
			hi.drained = false
			hi.unread[tableCursors] = unread
		}, []string{checkDrained}, []string{checkCursors}},
	})
}

// TestReport_SaysWhatAHarnessErrorHid: the report lists harness errors in
// their own section, says which check each one hid, and does not count
// them as violations.
func TestReport_SaysWhatAHarnessErrorHid(t *testing.T) {
	t.Parallel()
	hi := cleanHistory()
	hi.harnessErrs = []harnessError{{text: "terminate LISTEN backends: context canceled"}}
	hi.unread[tableCursors] = errors.New("timeout")
	out := check(hi).String()
	require.Contains(t, out, "PRODUCT VIOLATIONS: 0\n")
	require.Contains(t, out, "HARNESS ERRORS (the soak's own, not bothy's): 2; checks they hid: 1\n")
	require.Contains(t, out, "terminate LISTEN backends: context canceled (hides no check)")
	require.Contains(t, out, "could not read event_consumer_cursors: timeout (HIDES: "+checkCursors+")")
	require.Contains(t, out, "FAIL: no product violation, but the run did not check: "+checkCursors)
}

// TestRepeatsPerFault: the duplicates a fault explains are counted per
// fault and channel, with the most for one target, how soon after the
// fault the copies came and how long before it the earliest was accepted;
// those no fault explains are left to the duplicate check.
func TestRepeatsPerFault(t *testing.T) {
	t.Parallel()
	kill := at(10)
	dups := []duplicate{
		{channel: chanWebhooks, target: "a", seq: 5, first: at(9.9), again: at(11), cause: faultKill, fault: kill},
		{channel: chanWebhooks, target: "a", seq: 6, first: at(9.95), again: at(11.2), cause: faultKill, fault: kill},
		{channel: chanWebhooks, target: "b", seq: 6, first: at(9.97), again: at(10.5), cause: faultKill, fault: kill},
		{channel: chanPush, target: "phone", seq: 6, first: at(10.1), again: at(10.6), cause: faultKill, fault: kill},
		{channel: chanWebhooks, target: "c", seq: 7, first: at(20), again: at(21), cause: noFault},
	}
	require.Equal(t, [][]string{
		{faultKill, "t+10.00s", chanPush, "1", "1", "1", "600ms", "600ms", "0s"},
		{faultKill, "t+10.00s", chanWebhooks, "3", "2", "2", "500ms", "1.2s", "100ms"},
	}, repeatsPerFault(dups, at(0)))
}

// TestRepeatBound: a message sent again after a kill or a crash fails the
// run when it had been accepted longer before the fault than the stated
// bound; a repeat after a receiver's timeout window is not bounded.
func TestRepeatBound(t *testing.T) {
	t.Parallel()
	kill, crash := at(10), at(20)
	for _, c := range []struct {
		d    duplicate
		over bool
	}{
		{duplicate{channel: chanWebhooks, first: at(8), cause: faultKill, fault: kill}, false},
		{duplicate{channel: chanWebhooks, first: at(7.8), cause: faultKill, fault: kill}, true},
		{duplicate{channel: chanPush, first: at(8), cause: faultKill, fault: kill}, false},
		{duplicate{channel: chanPush, first: at(7.9), cause: faultKill, fault: kill}, true},
		{duplicate{channel: chanWebhooks, first: at(17), cause: faultPGCrash, fault: crash}, false},
		{duplicate{channel: chanWebhooks, first: at(16.5), cause: faultPGCrash, fault: crash}, true},
		{duplicate{channel: chanWebhooks, first: at(1), cause: faultWHTimeout, fault: kill}, false},
		{duplicate{channel: chanWebhooks, first: at(1), cause: faultTermPool, fault: kill}, false},
	} {
		limit, ok := repeatBound(c.d)
		require.Equal(t, c.over, ok && c.d.fault.Sub(c.d.first) > limit, "%+v", c.d)
	}
}
