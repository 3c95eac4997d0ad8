package httpapi_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
)

// failingType makes rv answer 500, while failing is set, to requests for
// events of type typ; it verifies the others. It returns rv's URL.
func failingType(t *testing.T, rv *idReceiver, typ string, failing *atomic.Bool) string {
	t.Helper()
	verified := webhookstest.Verified(webhookstest.Status(http.StatusNoContent))
	rv.SetRule(func(a *webhookstest.Arrival) webhookstest.Answer {
		if failing.Load() && len(a.Events) > 0 && a.Events[0].Type == typ {
			return webhookstest.Answer{Status: http.StatusInternalServerError}
		}
		return verified(a)
	})
	return rv.url()
}

// createWith creates a subscription on s1 for url with the policy fields
// of extra (a JSON object's members), hands its secret to rv and returns
// its path.
func (b *testBundle) createWith(t *testing.T, token string, rv *idReceiver, url, extra string) string {
	t.Helper()
	r := b.do(t, "POST", "/v1/webhooks", token, fmt.Sprintf(`{"space":"s1","url":%q,%s}`, url, extra))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	sub := r.json(t)
	rv.setSecret(t, sub["secret"].(string))
	return "/v1/webhooks/" + sub["id"].(string)
}

// failingSubscription creates owner's subscription to rv with a one-second
// retry budget and the extra fields policy, whose receiver fails events of
// type item.failed while the returned flag is set (it starts set).
func (b *testBundle) failingSubscription(t *testing.T, owner string, rv *idReceiver, policy string) (string, *atomic.Bool) {
	t.Helper()
	failing := new(atomic.Bool)
	failing.Store(true)
	sp := b.createWith(t, owner, rv, failingType(t, rv, "item.failed", failing),
		policy+`,"retry_base_seconds":0.1,"retry_max_seconds":0.2,"retry_budget_seconds":1`)
	return sp, failing
}

// TestAPI_DeadLetterListedAndResent: under ordered_dead_letter, a delivery
// that spent its budget is listed by GET …/deliveries?status=dead while the
// later events are delivered; a resend sends it, verified, with its
// event's webhook-id.
func TestAPI_DeadLetterListedAndResent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	rv := newIDReceiver(t)
	sp, failing := b.failingSubscription(t, owner, rv, `"policy":"ordered_dead_letter"`)

	seqs := b.appendEvents(t, owner, "item.created", "item.failed", "item.created")
	require.Equal(t, []int64{seqs[0], seqs[2]}, seqsSent(rv.waitFor(t, 2)), "the dead letter does not hold the others back")
	dead := b.do(t, "GET", sp+"/deliveries?status=dead", owner, "").json(t)["deliveries"].([]any)
	require.Len(t, dead, 1)
	d := dead[0].(map[string]any)
	require.EqualValues(t, seqs[1], d["seq"])
	require.Contains(t, d["last_error"], "retry budget")
	require.Equal(t, "active", b.do(t, "GET", sp, owner, "").json(t)["status"])

	failing.Store(false)
	r := b.do(t, "POST", fmt.Sprintf("%s/deliveries/%d/resend", sp, seqs[1]), owner, "")
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	got := rv.waitFor(t, 3)
	require.Equal(t, seqs[1], got[2].seq)
	require.Equal(t, d["event_id"], got[2].webhookID)
	require.Empty(t, b.do(t, "GET", sp+"/deliveries?status=dead", owner, "").json(t)["deliveries"])
}

// TestAPI_AutoRecoverShowsProbingAndResumes: with auto_recover, a
// subscription whose head spent its budget is shown disabled (failing)
// and probing, and is active again, with its backlog delivered in order,
// once the receiver answers.
func TestAPI_AutoRecoverShowsProbingAndResumes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	rv := newIDReceiver(t)
	sp, failing := b.failingSubscription(t, owner, rv, `"auto_recover":true`)

	seqs := b.appendEvents(t, owner, "item.failed", "item.created")
	var sub map[string]any
	deadline := time.Now().Add(20 * time.Second)
	for sub = b.do(t, "GET", sp, owner, "").json(t); sub["probing"] != true; sub = b.do(t, "GET", sp, owner, "").json(t) {
		require.True(t, time.Now().Before(deadline), "not probing: %v", sub)
		time.Sleep(20 * time.Millisecond) // polling the API
	}
	require.Equal(t, "disabled", sub["status"])
	require.Equal(t, "failing", sub["disabled_cause"])

	failing.Store(false)
	require.Equal(t, seqs, seqsSent(rv.waitFor(t, 2)), "the probed head, then the backlog")
	sub = b.do(t, "GET", sp, owner, "").json(t)
	require.Equal(t, "active", sub["status"])
	require.Equal(t, false, sub["probing"])
}
