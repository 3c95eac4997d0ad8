package push_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
)

func subscription(endpoint, p256dh, auth string) push.Subscription {
	var s push.Subscription
	s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, p256dh, auth
	return s
}

func TestRegistry_Register(t *testing.T) {
	t.Parallel()
	d, err := pushtest.NewDevice()
	require.NoError(t, err)
	const fcm = "https://fcm.googleapis.com/fcm/send/abc:def"

	t.Run("RefusesBadRegistrationsNamingTheField", func(t *testing.T) {
		t.Parallel()
		r := push.NewRegistry(nil)
		for _, tc := range []struct {
			name string
			sub  push.Subscription
			want string
		}{
			{"PlainHTTP", subscription("http://push.example.com/x", d.P256dh(), d.Auth()), "endpoint: scheme \"http\": push endpoints must be https"},
			{"NoEndpoint", subscription("", d.P256dh(), d.Auth()), "endpoint: missing"},
			{"NotAURL", subscription("https://%zz", d.P256dh(), d.Auth()), "endpoint: not a URL"},
			{"Loopback", subscription("https://127.0.0.1/push/x", d.P256dh(), d.Auth()), "endpoint: address 127.0.0.1 is not public"},
			{"PrivateRange", subscription("https://10.1.2.3/push/x", d.P256dh(), d.Auth()), "is not public"},
			{"LinkLocal", subscription("https://[fe80::1]/push/x", d.P256dh(), d.Auth()), "is not public"},
			{"Localhost", subscription("https://localhost:8443/x", d.P256dh(), d.Auth()), "is local"},
			{"UserInfo", subscription("https://u:p@push.example.com/x", d.P256dh(), d.Auth()), "user information"},
			{"KeyNotBase64", subscription(fcm, "not base64!", d.Auth()), "keys.p256dh: not base64url"},
			{"KeyNotAPoint", subscription(fcm, "BAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", d.Auth()), "keys.p256dh: not an uncompressed P-256 public key"},
			{"KeyMissing", subscription(fcm, "", d.Auth()), "keys.p256dh: missing"},
			{"AuthTooShort", subscription(fcm, d.P256dh(), "AAAA"), "keys.auth: 3 bytes, want 16"},
		} {
			_, err := r.Validate(&push.RegisterParams{Principal: "bob", Subscription: tc.sub})
			require.ErrorIs(t, err, push.ErrInvalidRegistration, tc.name)
			require.ErrorContains(t, err, tc.want, tc.name)
		}
		_, err := r.Validate(&push.RegisterParams{Principal: "bad principal", Subscription: subscription(fcm, d.P256dh(), d.Auth())})
		require.ErrorContains(t, err, "principal")
	})

	t.Run("AllowPrivateTargetsAcceptsLoopbackHTTP", func(t *testing.T) {
		t.Parallel()
		r := push.NewRegistry(&push.RegistryConfig{AllowPrivateTargets: true})
		_, err := r.Validate(&push.RegisterParams{Principal: "bob", Subscription: subscription("http://127.0.0.1:9/push/x", d.P256dh(), d.Auth())})
		require.NoError(t, err)
		_, err = r.Validate(&push.RegisterParams{Principal: "bob", Subscription: subscription("ftp://127.0.0.1/x", d.P256dh(), d.Auth())})
		require.ErrorIs(t, err, push.ErrInvalidRegistration)
	})

	t.Run("SamePrincipalAgainReplacesKeys", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		ctx := context.Background()
		r := push.NewRegistry(nil)
		first, err := r.Register(ctx, db.Pool, &push.RegisterParams{Principal: "bob", Subscription: subscription(fcm, d.P256dh(), d.Auth()), UserAgent: "Firefox"})
		require.NoError(t, err)
		d2, err := pushtest.NewDevice()
		require.NoError(t, err)
		// Standard base64 with padding is accepted and stored as base64url.
		second, err := r.Register(ctx, db.Pool, &push.RegisterParams{Principal: "bob", Subscription: subscription(fcm, toStd(d2.P256dh()), toStd(d2.Auth()))})
		require.NoError(t, err)
		require.Equal(t, first.ID, second.ID)
		require.Equal(t, "bob", second.Principal)
		require.Equal(t, d2.P256dh(), second.P256dh)
		require.Equal(t, d2.Auth(), second.Auth)
		require.NoError(t, r.Unregister(ctx, db.Pool, "bob", second.ID))
		_, err = r.Get(ctx, db.Pool, second.ID)
		require.ErrorIs(t, err, push.ErrNotFound)
	})

	t.Run("AnotherPrincipalCannotTakeOverAnEndpoint", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		ctx := context.Background()
		r := push.NewRegistry(nil)
		owned, err := r.Register(ctx, db.Pool, &push.RegisterParams{Principal: "bob", Subscription: subscription(fcm, d.P256dh(), d.Auth()), UserAgent: "Firefox"})
		require.NoError(t, err)
		// Mallory learned bob's endpoint URL and presents it with her own keys.
		m, err := pushtest.NewDevice()
		require.NoError(t, err)
		_, err = r.Register(ctx, db.Pool, &push.RegisterParams{Principal: "mallory", Subscription: subscription(fcm, m.P256dh(), m.Auth())})
		require.ErrorIs(t, err, push.ErrEndpointTaken)

		list, err := r.List(ctx, db.Pool, "bob")
		require.NoError(t, err)
		require.Len(t, list, 1, "the owner keeps its registration")
		require.Equal(t, owned.ID, list[0].ID)
		require.Equal(t, d.P256dh(), list[0].P256dh, "with its own keys, so only bob's browser can read the messages")
		require.Equal(t, d.Auth(), list[0].Auth)
		list, err = r.List(ctx, db.Pool, "mallory")
		require.NoError(t, err)
		require.Empty(t, list)

		// Once the owner removes it, the endpoint is free.
		require.NoError(t, r.Unregister(ctx, db.Pool, "bob", owned.ID))
		got, err := r.Register(ctx, db.Pool, &push.RegisterParams{Principal: "mallory", Subscription: subscription(fcm, m.P256dh(), m.Auth())})
		require.NoError(t, err)
		require.Equal(t, "mallory", got.Principal)
	})
}

func toStd(b64url string) string {
	out := []byte(b64url)
	for i, c := range out {
		switch c {
		case '-':
			out[i] = '+'
		case '_':
			out[i] = '/'
		}
	}
	for len(out)%4 != 0 {
		out = append(out, '=')
	}
	return string(out)
}

func TestCheckVAPIDKeys(t *testing.T) {
	t.Parallel()
	k, err := push.GenerateVAPIDKeys()
	require.NoError(t, err)
	other, err := push.GenerateVAPIDKeys()
	require.NoError(t, err)
	require.NoError(t, push.CheckVAPIDKeys(k.Public, k.Private))
	require.ErrorContains(t, push.CheckVAPIDKeys(k.Public, ""), "must be set together")
	require.ErrorContains(t, push.CheckVAPIDKeys(other.Public, k.Private), "does not belong")
	require.ErrorContains(t, push.CheckVAPIDKeys(k.Public, "AAAA"), "push.vapid_private_key: not a P-256 private key")
	err = push.CheckVAPIDKeys(k.Public, k.Private+"x!")
	require.Error(t, err)
	require.NotContains(t, err.Error(), k.Private, "the private key never appears in errors")
}
