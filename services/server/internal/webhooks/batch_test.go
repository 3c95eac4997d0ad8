package webhooks_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	gosync "sync"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// batchReceiver records the batch requests of a subscription with
// max_batch: each body must be a JSON array of envelopes and verify under
// the subscription's secret. fail, if set, answers a request with its
// status instead of 204 when it returns one.
type batchReceiver struct {
	srv    *httptest.Server
	mu     gosync.Mutex
	secret string
	fail   func(n int, seqs []int64) int
	got    [][]int64 // the seqs of each request, in arrival order
	ids    []string
	codes  []int
}

func newBatchReceiver(t *testing.T) *batchReceiver {
	t.Helper()
	rv := &batchReceiver{}
	rv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rv.mu.Lock()
		defer rv.mu.Unlock()
		var envs []sync.Envelope
		if err := json.Unmarshal(body, &envs); err != nil {
			t.Errorf("a batch request's body is not an array of envelopes: %v: %s", err, body)
		}
		wh, err := standardwebhooks.NewWebhook(rv.secret)
		if err == nil {
			err = wh.Verify(body, r.Header)
		}
		if err != nil {
			t.Errorf("batch signature: %v", err)
		}
		seqs := make([]int64, len(envs))
		for i, e := range envs {
			seqs[i] = e.Seq
		}
		code := http.StatusNoContent
		if rv.fail != nil {
			if c := rv.fail(len(rv.got)+1, seqs); c != 0 {
				code = c
			}
		}
		rv.got, rv.ids, rv.codes = append(rv.got, seqs), append(rv.ids, r.Header.Get("webhook-id")), append(rv.codes, code)
		w.WriteHeader(code)
	}))
	t.Cleanup(rv.srv.Close)
	return rv
}

func (rv *batchReceiver) requests() (seqs [][]int64, ids []string, codes []int) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return append([][]int64(nil), rv.got...), append([]string(nil), rv.ids...), append([]int(nil), rv.codes...)
}

// TestBatch_ConsecutiveEventsInOneRequest: a subscription with max_batch
// gets its backlog in requests of up to that many consecutive events, in
// seq order, each a JSON array under one signature with a webhook-id of
// its own.
func TestBatch_ConsecutiveEventsInOneRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rv := newBatchReceiver(t)
	s, secret := b.subscribe(t, &webhooks.CreateParams{URL: rv.srv.URL + "/hook", Policy: &webhooks.PolicyParams{MaxBatch: new(10)}})
	rv.secret = secret
	evs := b.emit(t, "s1", 25)
	b.round(t)
	b.start(t)
	b.waitDelivered(t, s.ID, seqsOfEvents(evs)...)

	got, ids, _ := rv.requests()
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
	rv := newBatchReceiver(t)
	rv.fail = func(n int, _ []int64) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return 0
	}
	s, secret := b.subscribe(t, &webhooks.CreateParams{URL: rv.srv.URL + "/hook", Policy: &webhooks.PolicyParams{MaxBatch: new(10)}})
	rv.secret = secret
	evs := b.emit(t, "s1", 15)
	seqs := seqsOfEvents(evs)
	b.round(t)
	b.start(t)
	b.waitDelivered(t, s.ID, seqs...)

	got, ids, codes := rv.requests()
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
