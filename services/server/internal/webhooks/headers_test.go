package webhooks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func TestDelivery_CustomHeadersArrive(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rv := newReceiver(t, nil)
	s, secret := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Headers: map[string]string{
		"authorization": "Bearer receiver-token-0123456789", "X-Tenant": "acme", "User-Agent": "acme-relay/2"}})
	rv.setSecret(t, secret)
	require.Equal(t, map[string]string{"Authorization": "Bearer receiver-token-0123456789", "X-Tenant": "acme", "User-Agent": "acme-relay/2"},
		s.Headers, "names are stored canonical")
	b.start(t)
	b.emit(t, "s1", 2)
	b.round(t)
	testwait.Until(t, 10*time.Second, func() bool { return rv.count() >= 2 }, "2 deliveries")

	t.Run("OnEveryRequestBesideAValidSignature", func(t *testing.T) {
		for _, r := range rv.requests() {
			require.Equal(t, "Bearer receiver-token-0123456789", r.Header.Get("Authorization"))
			require.Equal(t, "acme", r.Header.Get("X-Tenant"))
			require.Equal(t, "acme-relay/2", r.Header.Get("User-Agent"), "a User-Agent of the subscription replaces ours")
			require.Equal(t, "application/json", r.Header.Get("Content-Type"))
			require.NoError(t, r.SigErr)
		}
	})

	t.Run("PatchSetsAndRemovesByNameAndLaterRequestsFollow", func(t *testing.T) {
		token := "rotated-token-abcdefgh"
		got, err := webhooks.Update(context.Background(), b.db.Pool, s.ID, &webhooks.UpdateParams{Headers: map[string]*string{
			"AUTHORIZATION": &token, "x-tenant": nil}})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"Authorization": token, "User-Agent": "acme-relay/2"}, got.Headers)
		b.emit(t, "s1", 1)
		b.round(t)
		testwait.Until(t, 10*time.Second, func() bool { return rv.count() >= 3 }, "third delivery")
		r := rv.requests()[2]
		require.Equal(t, token, r.Header.Get("Authorization"))
		require.Empty(t, r.Header.Values("X-Tenant"))
		require.NoError(t, r.SigErr)
	})
}

func TestCreate_RefusesHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	create := func(h map[string]string) error {
		_, _, err := webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1",
			URL: "http://127.0.0.1:9/x", AllowPrivateTargets: true, Headers: h})
		return err
	}
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"SignatureID", map[string]string{"webhook-id": "x"}, "headers.Webhook-Id: this header cannot be set"},
		{"SignatureTimestamp", map[string]string{"Webhook-Timestamp": "1"}, "headers.Webhook-Timestamp"},
		{"Signature", map[string]string{"WEBHOOK-SIGNATURE": "v1,x"}, "headers.Webhook-Signature"},
		{"Connection", map[string]string{"connection": "close"}, "headers.Connection: this header cannot be set: it is a hop-by-hop header"},
		{"KeepAlive", map[string]string{"Keep-Alive": "1"}, "headers.Keep-Alive"},
		{"ProxyAuthorization", map[string]string{"Proxy-Authorization": "x"}, "headers.Proxy-Authorization"},
		{"TE", map[string]string{"te": "trailers"}, "headers.Te"},
		{"Trailer", map[string]string{"Trailer": "x"}, "headers.Trailer"},
		{"TransferEncoding", map[string]string{"Transfer-Encoding": "chunked"}, "headers.Transfer-Encoding"},
		{"Upgrade", map[string]string{"Upgrade": "h2c"}, "headers.Upgrade"},
		{"Host", map[string]string{"host": "internal"}, "headers.Host"},
		{"ContentLength", map[string]string{"Content-Length": "1"}, "headers.Content-Length"},
		{"ContentType", map[string]string{"content-type": "text/plain"}, "headers.Content-Type"},
		{"NotAFieldName", map[string]string{"X Bad": "1"}, `headers: name "X Bad"`},
		{"LongName", map[string]string{strings.Repeat("x", 65): "1"}, "at most 64 bytes"},
		{"NewlineInValue", map[string]string{"X-A": "a\r\nX-Injected: 1"}, "headers.X-A: value must be non-empty printable ASCII"},
		{"EmptyValue", map[string]string{"X-A": ""}, "headers.X-A: value must be non-empty"},
		{"LongValue", map[string]string{"X-A": strings.Repeat("v", 1025)}, "headers.X-A: value of 1025 bytes, at most 1024"},
		{"SameNameTwice", map[string]string{"x-a": "1", "X-A": "2"}, "headers.X-A: given twice"},
		{"TooMany", manyHeaders(webhooks.MaxHeaders+1, 1), "headers: 21 headers, at most 20"},
		{"TooLarge", manyHeaders(5, 1000), "bytes of names and values, at most 4096"},
	} {
		err := create(tc.headers)
		require.ErrorIs(t, err, webhooks.ErrInvalid, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
		for _, v := range tc.headers {
			if len(v) > 3 {
				require.NotContains(t, err.Error(), v, "%s: an error never shows a value", tc.name)
			}
		}
	}
	require.NoError(t, create(manyHeaders(webhooks.MaxHeaders, 1)), "the limit itself is allowed")

	t.Run("PatchResultIsBoundedAsAWhole", func(t *testing.T) {
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x", Headers: manyHeaders(webhooks.MaxHeaders, 1)})
		v := "x"
		_, err := webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Headers: map[string]*string{"X-One-More": &v}})
		require.ErrorContains(t, err, "headers: 21 headers, at most 20")
		require.Len(t, b.sub(t, s.ID).Headers, webhooks.MaxHeaders, "unchanged")
		_, err = webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Headers: map[string]*string{"Host": &v}})
		require.ErrorContains(t, err, "headers.Host")
	})
}

// TestMaskHeaderValue: a masked value shows none of the value, not even
// its length.
func TestMaskHeaderValue(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"Bearer 0123456789abcdef", "12345678", "abc", "", "ééééééé"} {
		require.Equal(t, webhooks.MaskedValue, webhooks.MaskHeaderValue(v), v)
	}
	require.Equal(t, webhooks.MaskedValue, webhooks.MaskHeaders(map[string]string{"Authorization": "Bearer 0123456789"})["Authorization"])
}

// manyHeaders returns n headers with values of size bytes.
func manyHeaders(n, size int) map[string]string {
	h := map[string]string{}
	for i := range n {
		h["X-H"+strings.Repeat("h", i)] = strings.Repeat("v", size)
	}
	return h
}
