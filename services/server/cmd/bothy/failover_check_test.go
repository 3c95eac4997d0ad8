package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// verify checks the log and every receiver against what the producers were
// told, on the formation's primary of the moment.
func (fo *failover) verify(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, fo.url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	logged := readLog(ctx, t, conn)
	acked, answers := fo.acks.snapshot()

	lost := 0
	for id, seq := range acked {
		if got, ok := logged[id]; !ok || got != seq {
			lost++
			t.Errorf("acknowledged event %s at seq %d: in the log at %d (0: missing)", id, seq, got)
		}
	}
	require.Zero(t, lost, "%d of %d acknowledged events are not in the log at their seq", lost, len(acked))
	for _, an := range answers {
		require.NotEqual(t, 500, an.status, "a producer was answered 500")
	}
	for _, r := range fo.receivers() {
		fo.verifyInbox(t, r, logged, acked)
	}
}

// readLog reads the whole log, checking that its seqs run from 1 without
// a gap, that the counter stands at the last, and that no id is there
// twice.
func readLog(ctx context.Context, t *testing.T, conn *pgx.Conn) map[string]int64 {
	rows, err := conn.Query(ctx, `SELECT seq, id::text FROM event_log ORDER BY seq`)
	require.NoError(t, err)
	logged := map[string]int64{}
	var want int64 = 1
	for rows.Next() {
		var seq int64
		var id string
		require.NoError(t, rows.Scan(&seq, &id))
		require.Equal(t, want, seq, "the log has a gap or a repeated seq")
		_, twice := logged[id]
		require.False(t, twice, "event %s is in the log twice", id)
		logged[id] = seq
		want++
	}
	require.NoError(t, rows.Err())
	var head int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT last_seq FROM event_seq`).Scan(&head))
	require.Equal(t, want-1, head, "the counter is not at the last logged seq")
	return logged
}

// verifyInbox checks one receiver: every acknowledged event arrived, every
// arrival is an event in the log at the seq it was sent with, an event
// arrived more than once only if its first copy came while a loss was
// under way, and, for the ordered subscription, each event arrived for the
// first time after every event before it (a receiver that drops repeats by
// webhook-id sees the log's order).
func (fo *failover) verifyInbox(t *testing.T, r *inbox, logged, acked map[string]int64) {
	got := r.arrivals()
	first := map[string]arrival{}
	var last int64
	for i, a := range got {
		id := a.id.String()
		require.Equal(t, logged[id], a.seq, "%s got event %s at seq %d, which the log does not hold (0: missing)", r.name, id, a.seq)
		if f, seen := first[id]; seen {
			require.True(t, fo.duringLoss(f.at), "%s got seq %d again; its first copy (%s) was not sent during a loss",
				r.name, a.seq, f.at.Format("15:04:05.000"))
			continue
		}
		first[id] = a
		if r.ordered {
			require.Greater(t, a.seq, last, "%s got seq %d for the first time after %d; losses: %s; arrivals: %s", r.name, a.seq, last,
				fo.lossTimes(), arrivalList(got[max(0, i-8):i+1]))
			last = a.seq
		}
	}
	require.Zero(t, missingFrom(r, acked), "%s lacks acknowledged events", r.name)
}

func arrivalList(as []arrival) string {
	var s []string
	for _, a := range as {
		s = append(s, fmt.Sprintf("%d@%s", a.seq, a.at.Format("15:04:05.000")))
	}
	return strings.Join(s, " ")
}

// lossTimes lists when each loss began (the pause) and ended (the
// promotion), for failure messages.
func (fo *failover) lossTimes() string {
	var s []string
	for _, l := range fo.losses {
		s = append(s, fmt.Sprintf("%d: %s-%s", l.n, l.paused.Format("15:04:05.000"), l.promoted.Format("15:04:05.000")))
	}
	return strings.Join(s, ", ")
}

// lossMargin is how long before a loss a send may have been made whose
// record the loss took: its record waits for the standby, which was
// paused, and the answer travels back to the worker.
const lossMargin = 2 * time.Second

// duringLoss reports whether at lies in a loss: from just before the
// standby was paused until the standby took writes.
func (fo *failover) duringLoss(at time.Time) bool {
	for _, l := range fo.losses {
		if at.After(l.paused.Add(-lossMargin)) && !at.After(l.promoted) {
			return true
		}
	}
	return false
}

// report logs every loss as the producers and the receivers saw it, and
// the repeats per receiver.
func (fo *failover) report(t *testing.T) {
	acked, answers := fo.acks.snapshot()
	statuses := map[int]int{}
	for _, an := range answers {
		statuses[an.status]++
	}
	t.Logf("%d events acknowledged; answers by status: %v", len(acked), statuses)
	for _, l := range fo.losses {
		t.Logf("loss %d: %s lost (%s during the standby's pause of %s); %s took writes %s after the loss; rejoined %s later",
			l.n, l.primary, l.held, l.killed.Sub(l.paused).Round(time.Millisecond), l.standby, secs(l.promoted.Sub(l.killed)),
			secs(l.rejoined.Sub(l.promoted)))
		t.Logf("loss %d: producers: %s", l.n, producerOutage(answers, l))
		for _, r := range fo.receivers() {
			before, _ := r.lastBefore(l.killed)
			after, _ := r.firstAfter(l.promoted)
			t.Logf("loss %d: %-17s last delivery %s before the loss, first %s after the promotion (gap %s)",
				l.n, r.name, secs(l.killed.Sub(before)), secs(after.Sub(l.promoted)), secs(after.Sub(before)))
		}
	}
	var dups []string
	for _, r := range fo.receivers() {
		dups = append(dups, fmt.Sprintf("%s %d", r.name, repeats(r)))
	}
	t.Logf("repeated deliveries (sends made during a loss): %s", strings.Join(dups, ", "))
}

// producerOutage describes the producers' view of loss l: the first failed
// answer after the pause began and the first 2xx after it.
func producerOutage(answers []answer, l *loss) string {
	var failed, back time.Time
	for _, an := range answers {
		switch {
		case an.at.Before(l.paused):
		case failed.IsZero() && an.status/100 != 2:
			failed = an.at
		case !failed.IsZero() && an.status/100 == 2:
			back = an.at
		}
		if !back.IsZero() {
			break
		}
	}
	if failed.IsZero() {
		return "no failed answer"
	}
	return fmt.Sprintf("first failure %s after the loss, 2xx again %s after the loss (%s after the promotion; outage %s)",
		secs(failed.Sub(l.killed)), secs(back.Sub(l.killed)), secs(back.Sub(l.promoted)), secs(back.Sub(failed)))
}

// repeats counts the arrivals of r beyond the first of each event.
func repeats(r *inbox) int {
	seen := map[string]bool{}
	n := 0
	for _, a := range r.arrivals() {
		if seen[a.id.String()] {
			n++
		}
		seen[a.id.String()] = true
	}
	return n
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
