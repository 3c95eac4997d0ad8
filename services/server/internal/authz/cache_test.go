package authz_test

import (
	"context"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// countingQuerier counts the reads that go to the database.
type countingQuerier struct {
	authz.Querier
	rows atomic.Int64
}

func (q *countingQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	q.rows.Add(1)
	return q.Querier.QueryRow(ctx, sql, args...)
}

// clock is a settable clock.
type clock struct {
	mu  gosync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestCache_Authenticate(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t)
	setupCache := func(t *testing.T, ttl time.Duration) (*authz.Cache, *countingQuerier, *clock, string) {
		t.Helper()
		tok, secret, err := authz.CreateToken(ctx, db.Pool, &authz.CreateTokenParams{Principal: "app1", Scopes: []string{"events:read"}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = authz.RevokeToken(context.WithoutCancel(ctx), db.Pool, tok.ID) })
		q := &countingQuerier{Querier: db.Pool}
		clk := &clock{now: time.Now()}
		return authz.NewCache(q, &authz.CacheConfig{TTL: ttl, Now: clk.Now}), q, clk, secret
	}

	t.Run("ReadsATokenOncePerTTL", func(t *testing.T) {
		c, q, clk, secret := setupCache(t, time.Second)
		for range 100 {
			s, err := c.Authenticate(ctx, secret)
			require.NoError(t, err)
			require.Equal(t, "app1", s.Principal)
			require.Equal(t, []string{"events:read"}, s.Scopes)
		}
		require.EqualValues(t, 1, q.rows.Load())
		clk.Add(time.Second)
		_, err := c.Authenticate(ctx, secret)
		require.NoError(t, err)
		require.EqualValues(t, 2, q.rows.Load(), "read again once the TTL passed")
	})
	t.Run("ARevokedTokenStopsWithinTheTTL", func(t *testing.T) {
		c, _, clk, secret := setupCache(t, time.Second)
		s, err := c.Authenticate(ctx, secret)
		require.NoError(t, err)
		require.NoError(t, authz.RevokeToken(ctx, db.Pool, s.TokenID))
		clk.Add(999 * time.Millisecond)
		_, err = c.Authenticate(ctx, secret)
		require.NoError(t, err, "still honoured inside the bound")
		clk.Add(time.Millisecond)
		_, err = c.Authenticate(ctx, secret)
		require.ErrorIs(t, err, authz.ErrUnauthenticated)
	})
	t.Run("ATokenIsNotKeptPastItsExpiry", func(t *testing.T) {
		c, q, clk, _ := setupCache(t, time.Minute)
		expires := clk.Now().Add(30 * time.Second)
		_, secret, err := authz.CreateToken(ctx, db.Pool, &authz.CreateTokenParams{Principal: "app1", Scopes: []string{}, ExpiresAt: &expires})
		require.NoError(t, err)
		_, err = c.Authenticate(ctx, secret)
		require.NoError(t, err)
		clk.Add(29 * time.Second)
		_, err = c.Authenticate(ctx, secret)
		require.NoError(t, err)
		require.EqualValues(t, 1, q.rows.Load())
		clk.Add(time.Second)
		_, _ = c.Authenticate(ctx, secret)
		require.EqualValues(t, 2, q.rows.Load(), "read again at the token's expiry, before the TTL")
	})
	t.Run("ABadTokenIsReadEachTime", func(t *testing.T) {
		c, q, _, secret := setupCache(t, time.Second)
		for range 3 {
			_, err := c.Authenticate(ctx, secret+"x")
			require.ErrorIs(t, err, authz.ErrUnauthenticated)
		}
		require.EqualValues(t, 3, q.rows.Load())
	})
	t.Run("ClearForgets", func(t *testing.T) {
		c, _, _, secret := setupCache(t, time.Minute)
		s, err := c.Authenticate(ctx, secret)
		require.NoError(t, err)
		require.NoError(t, authz.RevokeToken(ctx, db.Pool, s.TokenID))
		c.Clear()
		_, err = c.Authenticate(ctx, secret)
		require.ErrorIs(t, err, authz.ErrUnauthenticated)
	})
	t.Run("ZeroTTLReadsEachTime", func(t *testing.T) {
		c, q, _, secret := setupCache(t, 0)
		for range 3 {
			_, err := c.Authenticate(ctx, secret)
			require.NoError(t, err)
		}
		require.EqualValues(t, 3, q.rows.Load())
	})
}

func TestCache_Allowed(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t)
	require.NoError(t, authz.Grant(ctx, db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightWrite}))
	q := &countingQuerier{Querier: db.Pool}
	clk := &clock{now: time.Now()}
	c := authz.NewCache(q, &authz.CacheConfig{TTL: time.Second, Now: clk.Now})
	allowed := func(action authz.Action, scopes []string) bool {
		t.Helper()
		d, err := c.Allowed(ctx, &authz.Request{Action: action, Principal: "alice", Space: "s1", Scopes: scopes})
		require.NoError(t, err)
		return d.Allowed
	}

	require.True(t, allowed(authz.ActionEventAppend, []string{authz.ScopeEventsWrite}))
	require.False(t, allowed(authz.ActionEventAppend, []string{authz.ScopeEventsRead}), "scopes are the request's, decided each time")
	require.True(t, allowed(authz.ActionEventsRead, []string{authz.ScopeEventsRead}))
	require.EqualValues(t, 1, q.rows.Load(), "one read of the principal's right on the space")

	require.NoError(t, authz.Revoke(ctx, db.Pool, "s1", "alice"))
	clk.Add(999 * time.Millisecond)
	require.True(t, allowed(authz.ActionEventAppend, []string{authz.ScopeEventsWrite}), "still honoured inside the bound")
	clk.Add(time.Millisecond)
	require.False(t, allowed(authz.ActionEventAppend, []string{authz.ScopeEventsWrite}), "gone once the TTL passed")

	d, err := c.Allowed(ctx, &authz.Request{Action: authz.ActionEventAppend, Principal: "nobody", Space: "s1", Scopes: []string{authz.ScopeEventsWrite}})
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Contains(t, d.Reason, "does not exist")
}
