package webhooks_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	gosync "sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// TestUnordered_TakesOverFromADeadSender: as TestDelivery_TakesOverFromADeadSender
// for an unordered subscription, whose deliveries carry claims of their own
// (claim_owner): the delivery a dead process had in flight is sent again by
// a live one within seconds, although its claim would hold for minutes.
func TestUnordered_TakesOverFromADeadSender(t *testing.T) {
	t.Parallel()
	b := setup(t, nil) // its River client only inserts the rounds' jobs
	hung := make(chan struct{})
	var hangOnce gosync.Once
	release := make(chan struct{})
	rv := newReceiver(t, nil)
	t.Cleanup(func() { close(release) }) // before the server closes
	rv.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first := false
		hangOnce.Do(func() { first = true })
		if first {
			_, _ = io.Copy(io.Discard, r.Body)
			close(hung)
			select { // the dead process's request never ends
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		rv.serve(w, r)
	})
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(),
		Policy: &webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(1)}})

	cfg := fastRetries()
	cfg.Timeout = 2 * time.Minute // a claim holds for Timeout + 30 s
	cfg.LivenessSettle = time.Millisecond
	dead, _ := workerProcess(t, b, cfg)
	evs := b.emit(t, "s1", 1)
	b.round(t)
	select {
	case <-hung:
	case <-time.After(10 * time.Second):
		t.Fatal("the first sender never sent")
	}
	var owner string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT claim_owner FROM webhook_deliveries WHERE subscription_id = $1 AND event_seq = $2
		 AND claim_until > now() + interval '1 minute'`, s.ID, evs[0].Seq).Scan(&owner))
	require.Equal(t, dead.ID(), owner, "the delivery's claim names the sender's process")

	workerProcess(t, b, cfg)
	killedAt := time.Now()
	require.NoError(t, dead.Close(context.Background()))
	evs = append(evs, b.emit(t, "s1", 1)...)
	b.round(t) // a new job for the subscription, which only the live process can run

	eventually(t, 30*time.Second, func() bool { return rv.count() >= 2 }, "the live process delivers both events")
	t.Logf("delivered after %s", time.Since(killedAt))
	got := seqsOf(rv.requests())
	slices.Sort(got)
	require.Equal(t, []int64{evs[0].Seq, evs[1].Seq}, got, "the dead sender's delivery and the next, once each")
}
