package authz_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

func setup(t *testing.T) (context.Context, *dbtest.DB) {
	t.Helper()
	db := dbtest.NewDB(t)
	ctx := context.Background()
	require.NoError(t, authz.CreatePrincipal(ctx, db.Pool, "alice", authz.KindUser))
	require.NoError(t, authz.CreatePrincipal(ctx, db.Pool, "app1", authz.KindApp))
	return ctx, db
}

func TestAllowed(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t)
	q := db.Pool
	deliver := func(principal, space string, scopes []string, token *uuid.UUID) authz.Decision {
		t.Helper()
		d, err := authz.Allowed(ctx, q, &authz.Request{Action: authz.ActionWebhookDeliver, Principal: principal,
			Space: space, EventType: "item.created", Scopes: scopes, Token: token})
		require.NoError(t, err)
		return d
	}

	t.Run("NoRightIsDenied", func(t *testing.T) {
		d := deliver("alice", "s1", nil, nil)
		require.False(t, d.Allowed)
		require.Contains(t, d.Reason, "no right")
	})
	t.Run("UnknownPrincipalIsDenied", func(t *testing.T) {
		require.False(t, deliver("nobody", "s1", nil, nil).Allowed)
	})
	t.Run("EveryRightIncludesRead", func(t *testing.T) {
		for _, r := range []authz.Right{authz.RightRead, authz.RightWrite, authz.RightAdmin} {
			require.NoError(t, authz.Grant(ctx, q, &authz.GrantParams{Space: "s1", Principal: "alice", Right: r}))
			require.True(t, deliver("alice", "s1", nil, nil).Allowed, r)
		}
		require.False(t, deliver("alice", "s2", nil, nil).Allowed)
	})
	t.Run("ScopesNarrow", func(t *testing.T) {
		require.True(t, deliver("alice", "s1", []string{"events:read"}, nil).Allowed)
		require.True(t, deliver("alice", "s1", []string{"events:read@s1"}, nil).Allowed)
		require.False(t, deliver("alice", "s1", []string{"events:read@s2"}, nil).Allowed)
		require.False(t, deliver("alice", "s1", []string{"webhooks:manage"}, nil).Allowed)
		require.False(t, deliver("alice", "s1", []string{}, nil).Allowed)
	})
	t.Run("RevokeTakesEffectAtOnce", func(t *testing.T) {
		require.NoError(t, authz.Revoke(ctx, q, "s1", "alice"))
		require.False(t, deliver("alice", "s1", nil, nil).Allowed)
		require.NoError(t, authz.Grant(ctx, q, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightRead}))
	})
	t.Run("DisabledPrincipalIsDenied", func(t *testing.T) {
		require.NoError(t, authz.SetPrincipalDisabled(ctx, q, "alice", true))
		require.False(t, deliver("alice", "s1", nil, nil).Allowed)
		require.NoError(t, authz.SetPrincipalDisabled(ctx, q, "alice", false))
		require.True(t, deliver("alice", "s1", nil, nil).Allowed)
	})
	t.Run("TokenScopesAreReadFresh", func(t *testing.T) {
		tok, _, err := authz.CreateToken(ctx, q, &authz.CreateTokenParams{Principal: "alice", Scopes: []string{"events:read", "webhooks:manage"}})
		require.NoError(t, err)
		require.True(t, deliver("alice", "s1", nil, &tok.ID).Allowed)
		require.False(t, deliver("app1", "s1", nil, &tok.ID).Allowed, "token of another principal")
		require.NoError(t, authz.SetTokenScopes(ctx, q, tok.ID, []string{"webhooks:manage"}))
		require.False(t, deliver("alice", "s1", nil, &tok.ID).Allowed)
		require.NoError(t, authz.SetTokenScopes(ctx, q, tok.ID, []string{"events:read@s1"}))
		require.True(t, deliver("alice", "s1", nil, &tok.ID).Allowed)
		require.NoError(t, authz.RevokeToken(ctx, q, tok.ID))
		require.False(t, deliver("alice", "s1", nil, &tok.ID).Allowed)
	})
	t.Run("UnknownActionIsAnError", func(t *testing.T) {
		_, err := authz.Allowed(ctx, q, &authz.Request{Action: "nope", Principal: "alice", Space: "s1"})
		require.ErrorIs(t, err, authz.ErrUnknownAction)
	})
}

func TestGrant_Validates(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t)
	require.ErrorIs(t, authz.Grant(ctx, db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: "owner"}), authz.ErrInvalid)
	require.ErrorIs(t, authz.Grant(ctx, db.Pool, &authz.GrantParams{Space: "s1", Principal: "ghost", Right: authz.RightRead}), authz.ErrNotFound)
	require.NoError(t, authz.Grant(ctx, db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightAdmin}))
	require.NoError(t, authz.Grant(ctx, db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightRead}))
	r, err := authz.RightOn(ctx, db.Pool, "s1", "alice")
	require.NoError(t, err)
	require.Equal(t, authz.RightRead, r, "a grant replaces, so it can lower")
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t)
	q := db.Pool
	tok, secret, err := authz.CreateToken(ctx, q, &authz.CreateTokenParams{Principal: "app1", Scopes: []string{"events:read@s1"}, Name: "ci"})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(secret, "bothy_"))

	t.Run("StoresOnlyAHash", func(t *testing.T) {
		var n int
		require.NoError(t, q.QueryRow(ctx, `SELECT count(*) FROM tokens WHERE position($1 in encode(secret_hash, 'escape')) > 0`, secret[len(secret)-20:]).Scan(&n))
		require.Zero(t, n)
	})
	t.Run("GoodSecret", func(t *testing.T) {
		s, err := authz.Authenticate(ctx, q, "Bearer "+secret)
		require.NoError(t, err)
		require.Equal(t, "app1", s.Principal)
		require.Equal(t, tok.ID, s.TokenID)
		require.Equal(t, []string{"events:read@s1"}, s.Scopes)
	})
	t.Run("BadSecrets", func(t *testing.T) {
		for _, b := range []string{"", "x", secret + "x", secret[:len(secret)-1], "bothy_" + strings.Repeat("0", 32) + "_abc"} {
			_, err := authz.Authenticate(ctx, q, b)
			require.ErrorIs(t, err, authz.ErrUnauthenticated, b)
		}
	})
	t.Run("ExpiredRevokedDisabled", func(t *testing.T) {
		past := time.Now().Add(-time.Minute)
		_, s2, err := authz.CreateToken(ctx, q, &authz.CreateTokenParams{Principal: "app1", Scopes: []string{"events:read"}, ExpiresAt: &past})
		require.NoError(t, err)
		_, err = authz.Authenticate(ctx, q, s2)
		require.ErrorIs(t, err, authz.ErrUnauthenticated)

		require.NoError(t, authz.SetPrincipalDisabled(ctx, q, "app1", true))
		_, err = authz.Authenticate(ctx, q, secret)
		require.ErrorIs(t, err, authz.ErrUnauthenticated)
		require.NoError(t, authz.SetPrincipalDisabled(ctx, q, "app1", false))

		require.NoError(t, authz.RevokeToken(ctx, q, tok.ID))
		_, err = authz.Authenticate(ctx, q, secret)
		require.ErrorIs(t, err, authz.ErrUnauthenticated)
	})
	t.Run("InvalidScopeRefused", func(t *testing.T) {
		_, _, err := authz.CreateToken(ctx, q, &authz.CreateTokenParams{Principal: "app1", Scopes: []string{"everything"}})
		require.ErrorIs(t, err, authz.ErrInvalid)
	})
}

func TestCovers(t *testing.T) {
	t.Parallel()
	require.True(t, authz.Covers([]string{"events:read"}, "events:read", "a@b"))
	require.True(t, authz.Covers([]string{"events:read@a@b"}, "events:read", "a@b"))
	require.False(t, authz.Covers([]string{"events:read@a"}, "events:read", "a@b"))
	require.False(t, authz.Covers(nil, "events:read", "a"))
}

// TestQueueMany_DecidesAsAllowed: one statement for many requests gives
// each the decision Allowed gives it alone.
func TestQueueMany_DecidesAsAllowed(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t)
	q := db.Pool
	for _, p := range []string{"bob", "carol", "off"} {
		require.NoError(t, authz.CreatePrincipal(ctx, q, p, authz.KindUser))
	}
	for _, g := range []authz.GrantParams{{Space: "s1", Principal: "alice", Right: authz.RightRead},
		{Space: "s1", Principal: "bob", Right: authz.RightAdmin}, {Space: "s2", Principal: "carol", Right: authz.RightWrite},
		{Space: "s1", Principal: "off", Right: authz.RightRead}} {
		require.NoError(t, authz.Grant(ctx, q, &g))
	}
	require.NoError(t, authz.SetPrincipalDisabled(ctx, q, "off", true))
	good, _, err := authz.CreateToken(ctx, q, &authz.CreateTokenParams{Principal: "alice", Scopes: []string{"events:read@s1"}})
	require.NoError(t, err)
	narrow, _, err := authz.CreateToken(ctx, q, &authz.CreateTokenParams{Principal: "bob", Scopes: []string{"webhooks:manage"}})
	require.NoError(t, err)
	revoked, _, err := authz.CreateToken(ctx, q, &authz.CreateTokenParams{Principal: "bob", Scopes: []string{"events:read"}})
	require.NoError(t, err)
	require.NoError(t, authz.RevokeToken(ctx, q, revoked.ID))
	missing := uuid.New()

	var reqs []authz.Request
	for _, principal := range []string{"alice", "bob", "carol", "off", "nobody"} {
		for _, space := range []string{"s1", "s2"} {
			for _, tok := range []*uuid.UUID{nil, &good.ID, &narrow.ID, &revoked.ID, &missing} {
				reqs = append(reqs, authz.Request{Action: authz.ActionPushDeliver, Principal: principal, Space: space, Token: tok})
			}
			reqs = append(reqs, authz.Request{Action: authz.ActionPushDeliver, Principal: principal, Space: space, Scopes: []string{}})
		}
	}
	b := &pgx.Batch{}
	pending, err := authz.QueueMany(b, reqs)
	require.NoError(t, err)
	require.Equal(t, 1, b.Len(), "one statement for all")
	require.NoError(t, q.SendBatch(ctx, b).Close())
	allowed := 0
	for i := range reqs {
		got, err := pending[i].Decision()
		require.NoError(t, err)
		want, err := authz.Allowed(ctx, q, &reqs[i])
		require.NoError(t, err)
		require.Equal(t, want, got, "%+v", reqs[i])
		if got.Allowed {
			allowed++
		}
	}
	require.Equal(t, 4, allowed, "alice and bob on s1, carol on s2, each on their own rights; alice through her token")

	_, err = authz.QueueMany(&pgx.Batch{}, []authz.Request{{Action: "nope"}})
	require.ErrorIs(t, err, authz.ErrUnknownAction)
}
