package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// sent is one request an idReceiver verified.
type sent struct {
	seq       int64
	webhookID string
}

// idReceiver is a receiver whose waitFor gives each verified request's
// seq and webhook-id, in arrival order.
type idReceiver struct{ *receiver }

func newIDReceiver(t *testing.T) *idReceiver {
	t.Helper()
	return &idReceiver{newReceiver(t)}
}

// waitFor waits until n verified requests arrived and returns them all.
func (rv *idReceiver) waitFor(t *testing.T, n int) []sent {
	t.Helper()
	var out []sent
	for _, a := range rv.waitVerified(t, n) {
		out = append(out, sent{seq: a.Seq, webhookID: a.ID})
	}
	return out
}

func seqsSent(ss []sent) []int64 {
	out := make([]int64, len(ss))
	for i, s := range ss {
		out[i] = s.seq
	}
	return out
}

// appendEvents appends events of the types to s1 as token and returns
// their seqs.
func (b *testBundle) appendEvents(t *testing.T, token string, types ...string) []int64 {
	t.Helper()
	evs := make([]map[string]string, len(types))
	for i, typ := range types {
		evs[i] = map[string]string{"type": typ}
	}
	body, err := json.Marshal(map[string]any{"events": evs})
	require.NoError(t, err)
	r := b.do(t, "POST", "/v1/spaces/s1/events", token, string(body))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	var out []int64
	for _, e := range r.json(t)["events"].([]any) {
		out = append(out, int64(e.(map[string]any)["seq"].(float64)))
	}
	return out
}

// TestAPI_WebhookResendRecoverEnable drives resend, recover and enable
// from the backlog through the running server, with a receiver that
// verifies every signature.
func TestAPI_WebhookResendRecoverEnable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	admin := b.principal(t, "boss", authz.RightAdmin, "s1", allScopes...)
	stranger := b.principal(t, "stranger", authz.RightRead, "s1", allScopes...)
	outsider := b.principal(t, "outsider", "", "", allScopes...)
	_, ownerNoManage, err := authz.CreateToken(ctx, b.db.Pool, &authz.CreateTokenParams{Principal: "owner", Scopes: []string{authz.ScopeEventsRead}})
	require.NoError(t, err)
	rv := newIDReceiver(t)

	r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q,"event_types":["item.*"]}`, rv.url()))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	sub := r.json(t)
	rv.setSecret(t, sub["secret"].(string))
	sp := "/v1/webhooks/" + sub["id"].(string)
	n := 0 // verified requests so far
	// disable disables the subscription once what the receiver answered is
	// recorded: a sender may keep a batch answered 2xx unrecorded for a
	// moment, and a disable and enable within it lets the next sender send
	// that batch again, which these cases do not look at.
	disable := func(t *testing.T) {
		t.Helper()
		if got := rv.waitFor(t, n); len(got) > 0 {
			last := got[len(got)-1].seq
			require.Eventually(t, func() bool {
				r := b.do(t, "GET", fmt.Sprintf("%s/deliveries/%d", sp, last), owner, "")
				return r.status == http.StatusOK && r.json(t)["status"] == "delivered"
			}, 30*time.Second, 10*time.Millisecond)
		}
		require.Equal(t, http.StatusOK, b.do(t, "POST", sp+"/disable", owner, "").status)
	}

	t.Run("ResendSendsTheSameWebhookIDAgain", func(t *testing.T) {
		seqs := b.appendEvents(t, owner, "item.created", "item.updated")
		got := rv.waitFor(t, n+2)
		n += 2
		require.Equal(t, seqs, seqsSent(got[n-2:]))

		// The receiver's answer comes before the sender records it, and a
		// pending delivery is not resent: wait for the record.
		var created any
		require.Eventually(t, func() bool {
			r := b.do(t, "GET", fmt.Sprintf("%s/deliveries/%d", sp, seqs[0]), owner, "")
			if r.status != http.StatusOK {
				return false
			}
			d := r.json(t)
			created = d["created_at"]
			return d["status"] == "delivered"
		}, 30*time.Second, 10*time.Millisecond)
		r := b.do(t, "POST", fmt.Sprintf("%s/deliveries/%d/resend", sp, seqs[0]), owner, "")
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
		d := r.json(t)
		require.Equal(t, "pending", d["status"])
		require.EqualValues(t, seqs[0], d["seq"])
		require.Equal(t, created, d["created_at"], "a resend keeps the delivery's creation time")
		require.NotEmpty(t, d["resent_at"], "and records its own")
		// The live sender may send it again before the answer is read, so
		// the answer lists the first attempt and perhaps the new one.
		atts := d["attempt_list"].([]any)
		require.NotEmpty(t, atts, "the first attempt stays listed")
		require.LessOrEqual(t, len(atts), 2)
		require.EqualValues(t, http.StatusNoContent, atts[0].(map[string]any)["status_code"], "the first attempt stays listed")
		got = rv.waitFor(t, n+1)
		n++
		require.Equal(t, seqs[0], got[n-1].seq)
		require.Equal(t, got[n-3].webhookID, got[n-1].webhookID, "the same webhook-id as the first request")
		require.Equal(t, d["event_id"], got[n-1].webhookID)

		b.do(t, "POST", fmt.Sprintf("%s/deliveries/%d/resend", sp, seqs[1]+100), owner, "").problem(t, http.StatusNotFound)
		b.do(t, "POST", sp+"/deliveries/first/resend", owner, "").problem(t, http.StatusNotFound)
		b.do(t, "POST", fmt.Sprintf("%s/deliveries/%d/resend", sp, seqs[0]), owner, `{"now":true}`).problem(t, http.StatusBadRequest)
	})

	t.Run("OthersCannotResendRecoverOrEnable", func(t *testing.T) {
		resend := fmt.Sprintf("%s/deliveries/%d/resend", sp, 1)
		for _, token := range []string{stranger, outsider} {
			b.do(t, "POST", resend, token, "").problem(t, http.StatusNotFound)
			b.do(t, "POST", sp+"/recover", token, `{"from_seq":1}`).problem(t, http.StatusNotFound)
			b.do(t, "POST", sp+"/enable", token, `{"from":"backlog"}`).problem(t, http.StatusNotFound)
		}
		b.do(t, "POST", resend, ownerNoManage, "").problem(t, http.StatusForbidden)
		b.do(t, "POST", sp+"/recover", ownerNoManage, `{"from_seq":1}`).problem(t, http.StatusForbidden)

		// A space admin may manage the subscription, but the owner, whose
		// rights every delivery acts with, may no longer read the space.
		require.NoError(t, authz.Revoke(ctx, b.db.Pool, "s1", "owner"))
		require.Contains(t, b.do(t, "POST", resend, admin, "").problem(t, http.StatusForbidden), `the owner "owner" may not receive`)
		b.do(t, "POST", sp+"/recover", admin, `{"from_seq":1}`).problem(t, http.StatusForbidden)
		require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: "s1", Principal: "owner", Right: authz.RightWrite}))
	})

	t.Run("RecoverBySeqAndTimeWithAPartLostToRetention", func(t *testing.T) {
		disable(t)
		missed := b.appendEvents(t, owner, "item.created", "note.deleted", "item.created", "item.updated")
		r := b.do(t, "POST", sp+"/enable", owner, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, "head", r.json(t)["from"])

		// Retention removes the first of them.
		_, err := b.db.Pool.Exec(ctx, `DELETE FROM event_log WHERE seq <= $1`, missed[0])
		require.NoError(t, err)
		_, err = b.db.Pool.Exec(ctx, `UPDATE event_log_retention SET low_seq = $1`, missed[1])
		require.NoError(t, err)

		r = b.do(t, "POST", sp+"/recover", owner, fmt.Sprintf(`{"from_seq":%d,"to_seq":%d}`, missed[0], missed[2]))
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
		require.Equal(t, map[string]any{
			"range":   map[string]any{"from": float64(missed[1]), "to": float64(missed[2])},
			"reset":   0.0,
			"created": 1.0,
			"lost":    map[string]any{"from": float64(missed[0]), "to": float64(missed[0])},
		}, r.json(t), "note.deleted does not match item.*")
		got := rv.waitFor(t, n+1)
		n++
		require.Equal(t, missed[2], got[n-1].seq)

		var keptFrom time.Time
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT committed_at FROM event_log WHERE seq = $1`, missed[1]).Scan(&keptFrom))
		r = b.do(t, "POST", sp+"/recover", owner, `{"since":"2001-02-03T04:05:06Z"}`)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
		out := r.json(t)
		require.EqualValues(t, 1, out["created"], "%s was recovered already", out)
		lost := out["lost"].(map[string]any)
		require.Equal(t, "2001-02-03T04:05:06Z", lost["since"])
		until, err := time.Parse(time.RFC3339Nano, lost["until"].(string))
		require.NoError(t, err)
		require.True(t, keptFrom.Equal(until), "lost until the oldest retained event: %s, want %s", until, keptFrom)
		got = rv.waitFor(t, n+1)
		n++
		require.Equal(t, missed[3], got[n-1].seq)

		r = b.do(t, "POST", sp+"/recover", owner, `{}`)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
		require.EqualValues(t, 0, r.json(t)["created"], "from the creation: everything is delivered or pending")
		for _, body := range []string{`{"from_seq":1,"since":"2001-02-03T04:05:06Z"}`, `{"to_seq":3}`, `{"from_seq":5,"to_seq":4}`,
			`{"since":"2001-02-03T04:05:06Z","until":"2001-02-03T04:05:06Z"}`} {
			b.do(t, "POST", sp+"/recover", owner, body).problem(t, http.StatusUnprocessableEntity)
		}
		b.do(t, "POST", sp+"/recover", owner, `{"from_seq":0}`).problem(t, http.StatusUnprocessableEntity)
		b.do(t, "POST", sp+"/recover", owner, `{"since":"yesterday"}`).problem(t, http.StatusBadRequest)
	})

	t.Run("EnableFromBacklogSendsWhatWasMissedInOrder", func(t *testing.T) {
		disable(t)
		missed := b.appendEvents(t, owner, "item.created", "item.updated")
		r := b.do(t, "POST", sp+"/enable", owner, `{"from":"backlog"}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		e := r.json(t)
		require.Equal(t, "backlog", e["from"])
		require.EqualValues(t, 2, e["created"])
		require.EqualValues(t, 0, e["skipped"])
		require.Nil(t, e["not_delivered"])
		require.Equal(t, "active", e["subscription"].(map[string]any)["status"])
		got := rv.waitFor(t, n+2)
		n += 2
		require.Equal(t, missed, seqsSent(got[n-2:]))

		r = b.do(t, "POST", sp+"/recover", owner, fmt.Sprintf(`{"from_seq":%d}`, missed[0]))
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
		require.EqualValues(t, 0, r.json(t)["created"], "each event is delivered once")
	})

	t.Run("EnableFromTheHeadIsTheDefault", func(t *testing.T) {
		disable(t)
		b.do(t, "POST", sp+"/enable", owner, `{"from":"middle"}`).problem(t, http.StatusUnprocessableEntity)
		missed := b.appendEvents(t, owner, "item.created")
		r := b.do(t, "POST", sp+"/enable", owner, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		e := r.json(t)
		require.Equal(t, "head", e["from"])
		require.EqualValues(t, 0, e["created"])
		require.EqualValues(t, missed[0], e["resume_after_seq"])
		require.Equal(t, map[string]any{"from": float64(missed[0]), "to": float64(missed[0])}, e["not_delivered"])
		later := b.appendEvents(t, owner, "item.created")
		got := rv.waitFor(t, n+1)
		n++
		require.Equal(t, later[0], got[n-1].seq, "not %d: it came while disabled", missed[0])

		disable(t)
		b.do(t, "POST", fmt.Sprintf("%s/deliveries/%d/resend", sp, later[0]), owner, "").problem(t, http.StatusConflict)
		b.do(t, "POST", sp+"/recover", owner, `{"from_seq":1}`).problem(t, http.StatusConflict)
		r = b.do(t, "POST", sp+"/enable", owner, `{"from":"head"}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, "head", r.json(t)["from"])
	})
}
