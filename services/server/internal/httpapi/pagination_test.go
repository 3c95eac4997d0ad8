package httpapi_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// walk follows next_cursor from path's first page to its last, calling
// between after every page but the last, and returns the ids (field idKey)
// of every item of every page, in order.
func (b *testBundle) walk(t *testing.T, path, token, listKey, idKey string, between func()) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "the walk ends")
		p := path
		if cursor != "" {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		r := b.do(t, "GET", p, token, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		body := r.json(t)
		for _, it := range body[listKey].([]any) {
			ids = append(ids, fmt.Sprint(it.(map[string]any)[idKey]))
		}
		next, _ := body["next_cursor"].(string)
		if next == "" {
			return ids
		}
		cursor = next
		between()
	}
}

// once checks that ids has no repeats and returns them as a set.
func once(t *testing.T, ids []string) map[string]bool {
	t.Helper()
	set := map[string]bool{}
	for _, id := range ids {
		require.False(t, set[id], "%s seen twice", id)
		set[id] = true
	}
	return set
}

// TestAPI_PaginationWalksEveryItemOnce walks each list a few items a page
// while items are added between the pages, and checks the walk against a
// full count from the database: no item twice, none that existed at the
// start missing.
func TestAPI_PaginationWalksEveryItemOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	require.NoError(t, authz.Grant(t.Context(), b.db.Pool, &authz.GrantParams{Space: "s2", Principal: "owner", Right: authz.RightWrite}))
	rv := newHeaderReceiver(t)
	create := func(space string) string {
		t.Helper()
		r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":%q,"url":%q}`, space, rv.url()))
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		return r.json(t)["id"].(string)
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), sql, args...).Scan(&n))
		return n
	}

	t.Run("Webhooks", func(t *testing.T) {
		var before []string
		for i := range 12 {
			before = append(before, create("s1"))
			if i%3 == 0 {
				create("s2") // skipped below: the owner loses its right on s2
			}
		}
		require.NoError(t, authz.Revoke(t.Context(), b.db.Pool, "s2", "owner"))
		pages := 0
		seen := once(t, b.walk(t, "/v1/webhooks?limit=5", owner, "subscriptions", "id", func() {
			pages++
			create("s1")
		}))
		for _, id := range before {
			require.True(t, seen[id], "%s existed before the walk and was not seen", id)
		}
		require.Equal(t, count(`SELECT count(*) FROM webhook_subscriptions WHERE owner = 'owner' AND space = 's1'`), len(seen),
			"the walk saw every subscription the owner may manage, also those created during it")
		require.Equal(t, 2, pages, "12 + 2 created during the walk: pages of 5, 5 and 4; the skipped ones on s2 leave no page short")
	})

	t.Run("Deliveries", func(t *testing.T) {
		require.NoError(t, authz.Grant(t.Context(), b.db.Pool, &authz.GrantParams{Space: "s3", Principal: "owner", Right: authz.RightWrite}))
		r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s3","url":%q}`, rv.url()))
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		id := r.json(t)["id"].(string)
		deliveries := func() int {
			return count(`SELECT count(*) FROM webhook_deliveries WHERE subscription_id = $1`, id)
		}
		emit := func(n int) {
			t.Helper()
			want := deliveries() + n
			events := ""
			for i := range n {
				events += fmt.Sprintf(`%s{"type":"item.created","data":{"i":%d}}`, map[bool]string{true: "", false: ","}[i == 0], i)
			}
			require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/spaces/s3/events", owner, `{"events":[`+events+`]}`).status)
			require.Eventually(t, func() bool { return deliveries() == want }, 10*time.Second, 10*time.Millisecond, "the round made the deliveries")
		}
		emit(23)
		var top int
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT max(event_seq) FROM webhook_deliveries WHERE subscription_id = $1`, id).Scan(&top))
		seqs := b.walk(t, "/v1/webhooks/"+id+"/deliveries?limit=4", owner, "deliveries", "seq", func() { emit(1) })
		once(t, seqs)
		require.Len(t, seqs, count(`SELECT count(*) FROM webhook_deliveries WHERE subscription_id = $1 AND event_seq <= $2`, id, top),
			"every delivery older than the walk's first page, each once, although newer ones were added before it")
		require.Len(t, seqs, 23)
		require.Equal(t, fmt.Sprint(top), seqs[0], "newest first")

		r = b.do(t, "GET", "/v1/webhooks/"+id+"/deliveries?limit=501", owner, "")
		require.Contains(t, r.problem(t, http.StatusBadRequest), "want 1..500")
		first := b.do(t, "GET", "/v1/webhooks/"+id+"/deliveries?limit=1", owner, "").json(t)["next_cursor"].(string)
		require.Contains(t, b.do(t, "GET", "/v1/webhooks?cursor="+first, owner, "").problem(t, http.StatusBadRequest), "cursor: not a cursor of this list")
		other := create("s1")
		require.Contains(t, b.do(t, "GET", "/v1/webhooks/"+other+"/deliveries?cursor="+first, owner, "").problem(t, http.StatusBadRequest), "cursor")
		b.do(t, "GET", "/v1/webhooks?cursor=bm90LWEtY3Vyc29y", owner, "").problem(t, http.StatusBadRequest)
	})

	t.Run("PushRegistrations", func(t *testing.T) {
		device := b.principal(t, "device-owner", authz.RightRead, "s1", authz.ScopePushManage)
		register := func(n int) string {
			t.Helper()
			key, err := ecdh.P256().GenerateKey(rand.Reader)
			require.NoError(t, err)
			auth := make([]byte, 16)
			_, _ = rand.Read(auth)
			r := b.do(t, "POST", "/v1/push/registrations", device, fmt.Sprintf(
				`{"subscription":{"endpoint":"https://push.example.com/send/%d","keys":{"p256dh":%q,"auth":%q}},"user_agent":"test"}`,
				n, base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()), base64.RawURLEncoding.EncodeToString(auth)))
			require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
			return r.json(t)["id"].(string)
		}
		var before []string
		for i := range 7 {
			before = append(before, register(i))
		}
		n := 100
		seen := once(t, b.walk(t, "/v1/push/registrations?limit=3", device, "registrations", "id", func() {
			n++
			register(n)
			register(0) // registering an endpoint again keeps its place
		}))
		for _, id := range before {
			require.True(t, seen[id], "%s existed before the walk and was not seen", id)
		}
		require.Equal(t, count(`SELECT count(*) FROM push_registrations WHERE principal = 'device-owner'`), len(seen))
		b.do(t, "GET", "/v1/push/registrations?limit=0", device, "").problem(t, http.StatusBadRequest)
	})
}
