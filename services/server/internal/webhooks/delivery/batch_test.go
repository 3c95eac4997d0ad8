package delivery_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// batchRequests are the requests rv saw, each of which must be a JSON
// array of envelopes verified under the subscription's secret: the seqs of
// each, its webhook-id and its answer, in arrival order.
func batchRequests(t *testing.T, rv *receiver) (seqs [][]int64, ids []string, codes []int) {
	t.Helper()
	for _, a := range rv.Arrivals() {
		require.True(t, a.Batch, "a batch request's body is an array of envelopes: %s", a.Body)
		require.NoError(t, a.SigErr, "batch signature")
		seqs, ids, codes = append(seqs, a.Seqs()), append(ids, a.ID), append(codes, a.Status)
	}
	return seqs, ids, codes
}

// answer204 answers every request 204.
func answer204(request, int) (int, map[string]string) { return http.StatusNoContent, nil }

// TestBatch_ConsecutiveEventsInOneRequest: a subscription with max_batch
// gets its backlog in requests of up to that many consecutive events, in
// seq order, each a JSON array under one signature with a webhook-id of
// its own.
func TestBatch_ConsecutiveEventsInOneRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rv := newReceiver(t, answer204)
	s, secret := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Policy: &webhooks.PolicyParams{MaxBatch: new(10)}})
	rv.setSecret(t, secret)
	evs := b.emit(t, "s1", 25)
	b.round(t)
	b.start(t)
	b.waitDelivered(t, s.ID, seqsOfEvents(evs)...)

	got, ids, _ := batchRequests(t, rv)
	var all []int64
	for i, r := range got {
		require.LessOrEqual(t, len(r), 10, "request %d", i)
		require.True(t, strings.HasPrefix(ids[i], "batch_"), "webhook-id %q", ids[i])
		all = append(all, r...)
	}
	require.Equal(t, seqsOfEvents(evs), all, "every event once, in seq order")
	require.Len(t, got, 3, "25 pending events in batches of 10")
	require.Equal(t, 10, b.sub(t, s.ID).Policy.MaxBatch)
}

// TestBatch_AFailedBatchIsRetriedFromItsHeadAlone: a batch answered 500
// is retried from its first event alone, so that a bad event further in
// cannot keep the others from being delivered; once the head is delivered,
// batching resumes. Order is kept throughout.
func TestBatch_AFailedBatchIsRetriedFromItsHeadAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rv := newReceiver(t, func(r request, _ int) (int, map[string]string) {
		if r.N == 1 {
			return http.StatusInternalServerError, nil
		}
		return http.StatusNoContent, nil
	})
	s, secret := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Policy: &webhooks.PolicyParams{MaxBatch: new(10)}})
	rv.setSecret(t, secret)
	evs := b.emit(t, "s1", 15)
	seqs := seqsOfEvents(evs)
	b.round(t)
	b.start(t)
	b.waitDelivered(t, s.ID, seqs...)

	got, ids, codes := batchRequests(t, rv)
	require.Equal(t, [][]int64{seqs[:10], seqs[:1], seqs[1:11], seqs[11:]}, got)
	require.Equal(t, []int{500, 204, 204, 204}, codes)
	atts, err := webhooks.Attempts(context.Background(), b.db.Pool, s.ID, seqs[5])
	require.NoError(t, err)
	require.Len(t, atts, 2, "an event of the failed batch has its failed attempt and its delivery")
	// Each attempt keeps the webhook-id its request was signed under, the
	// failed one's as the delivered one's.
	require.Equal(t, []string{ids[0], ids[2]}, messageIDs(atts))
	atts, err = webhooks.Attempts(context.Background(), b.db.Pool, s.ID, seqs[0])
	require.NoError(t, err)
	require.Equal(t, []string{ids[0], ids[1]}, messageIDs(atts), "the head's batch of one has an id of its own")
}

// messageIDs are the attempts' recorded webhook-ids, "<nil>" for none.
func messageIDs(atts []webhooks.Attempt) []string {
	out := make([]string, len(atts))
	for i, a := range atts {
		out[i] = "<nil>"
		if a.MessageID != nil {
			out[i] = *a.MessageID
		}
	}
	return out
}

// TestBatch_OnlyWithTheOrderedPolicies: max_batch is refused for an
// unordered subscription, whose deliveries are acknowledged one by one.
func TestBatch_OnlyWithTheOrderedPolicies(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, _, err := webhooks.Create(context.Background(), b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1",
		URL: "http://127.0.0.1:9/hook", AllowPrivateTargets: true,
		Policy: &webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxBatch: new(5)}})
	require.ErrorIs(t, err, webhooks.ErrInvalid)
	require.ErrorContains(t, err, "max_batch")
}
