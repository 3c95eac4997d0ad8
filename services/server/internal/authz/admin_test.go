package authz_test

import (
	"context"
	"fmt"
	gosync "sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// subject makes principal id (if new) with a token of scopes, expiring at
// expires if set, and returns it as an authenticated subject.
func subject(t *testing.T, db *dbtest.DB, id string, expires *time.Time, scopes ...string) *authz.Subject {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, authz.CreatePrincipal(ctx, db.Pool, id, authz.KindUser))
	if scopes == nil {
		scopes = []string{}
	}
	tok, _, err := authz.CreateToken(ctx, db.Pool, &authz.CreateTokenParams{Principal: id, Scopes: scopes, ExpiresAt: expires})
	require.NoError(t, err)
	return &authz.Subject{Principal: id, TokenID: tok.ID, Scopes: tok.Scopes}
}

func TestMintToken(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t)
	mint := func(by *authz.Subject, principal string, expires *time.Time, scopes ...string) (*authz.Token, error) {
		tok, _, err := authz.MintToken(ctx, db.Pool, &authz.MintTokenParams{By: by,
			CreateTokenParams: authz.CreateTokenParams{Principal: principal, Scopes: scopes, ExpiresAt: expires}})
		return tok, err
	}
	op := subject(t, db, "op", nil, authz.ScopePrincipalsManage, authz.ScopeEventsRead, "webhooks:manage@s1")

	t.Run("NeedsPrincipalsManage", func(t *testing.T) {
		plain := subject(t, db, "plain", nil, authz.ScopeEventsRead)
		_, err := mint(plain, "plain", nil, authz.ScopeEventsRead)
		require.ErrorIs(t, err, authz.ErrForbidden, "not even for itself")
		_, err = mint(plain, "alice", nil)
		require.ErrorIs(t, err, authz.ErrForbidden)
	})
	t.Run("HandsOutOnlyScopesItCarries", func(t *testing.T) {
		for _, ok := range [][]string{{authz.ScopeEventsRead}, {"events:read@s9"}, {"webhooks:manage@s1"}, {authz.ScopePrincipalsManage}, {}} {
			_, err := mint(op, "alice", nil, ok...)
			require.NoError(t, err, ok)
		}
		for _, bad := range []string{"webhooks:manage", "webhooks:manage@s2", authz.ScopeEventsWrite, authz.ScopeOpsRead} {
			_, err := mint(op, "alice", nil, bad)
			require.ErrorIs(t, err, authz.ErrForbidden, bad)
			require.ErrorContains(t, err, bad)
		}
	})
	t.Run("ExpiresNoLaterThanTheCaller", func(t *testing.T) {
		end := time.Now().Add(time.Hour).Truncate(time.Microsecond)
		short := subject(t, db, "short", &end, authz.ScopePrincipalsManage)
		tok, err := mint(short, "alice", nil)
		require.NoError(t, err)
		require.NotNil(t, tok.ExpiresAt, "inherits the caller's expiry")
		require.True(t, tok.ExpiresAt.Equal(end))
		later := end.Add(time.Minute)
		_, err = mint(short, "alice", &later)
		require.ErrorIs(t, err, authz.ErrForbidden)
		sooner := end.Add(-time.Minute)
		tok, err = mint(short, "alice", &sooner)
		require.NoError(t, err)
		require.True(t, tok.ExpiresAt.Equal(sooner))
		past := time.Now().Add(-time.Minute)
		_, err = mint(op, "alice", &past)
		require.ErrorIs(t, err, authz.ErrInvalid)
	})
	t.Run("UnknownPrincipalIsNotFound", func(t *testing.T) {
		_, err := mint(op, "nobody", nil)
		require.ErrorIs(t, err, authz.ErrNotFound)
	})
}

func TestSetMember(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t)
	set := func(by *authz.Subject, space, principal string, right authz.Right) error {
		_, err := authz.SetMember(ctx, db.Pool, &authz.SetMemberParams{By: by, Space: space, Principal: principal, Right: right})
		return err
	}
	rightOf := func(space, principal string) authz.Right {
		r, err := authz.RightOn(ctx, db.Pool, space, principal)
		require.NoError(t, err)
		return r
	}
	op := subject(t, db, "op", nil, authz.ScopePrincipalsManage)
	require.NoError(t, set(op, "s1", "op", authz.RightAdmin), "the first member of a new space")

	t.Run("AdminWithPrincipalsManageGrantsLowersAndRemoves", func(t *testing.T) {
		require.NoError(t, set(op, "s1", "alice", authz.RightWrite))
		require.Equal(t, authz.RightWrite, rightOf("s1", "alice"))
		require.NoError(t, set(op, "s1", "alice", authz.RightRead))
		require.Equal(t, authz.RightRead, rightOf("s1", "alice"))
		require.NoError(t, set(op, "s1", "alice", ""))
		require.Equal(t, authz.Right(""), rightOf("s1", "alice"))
	})
	t.Run("AdminWithoutTheScopeChangesNothing", func(t *testing.T) {
		adm := subject(t, db, "adm", nil, authz.ScopeWebhooksManage)
		require.NoError(t, set(op, "s1", "adm", authz.RightAdmin))
		require.ErrorIs(t, set(adm, "s1", "alice", authz.RightRead), authz.ErrForbidden)
		require.Equal(t, authz.Right(""), rightOf("s1", "alice"))
	})
	t.Run("BelowAdminChangesNothingNotEvenItsOwnRight", func(t *testing.T) {
		for _, r := range []authz.Right{authz.RightRead, authz.RightWrite} {
			low := subject(t, db, "low-"+string(r), nil, authz.ScopePrincipalsManage)
			require.NoError(t, set(op, "s1", low.Principal, r))
			err := set(low, "s1", low.Principal, authz.RightAdmin)
			require.ErrorIs(t, err, authz.ErrForbidden)
			require.ErrorContains(t, err, "needs admin")
			require.ErrorIs(t, set(low, "s1", "alice", authz.RightAdmin), authz.ErrForbidden)
			require.ErrorIs(t, set(low, "s1", "op", ""), authz.ErrForbidden)
			require.Equal(t, r, rightOf("s1", low.Principal))
			require.Equal(t, authz.RightAdmin, rightOf("s1", "op"))
		}
	})
	t.Run("NoRightOnASpaceWithMembersChangesNothing", func(t *testing.T) {
		other := subject(t, db, "other", nil, authz.ScopePrincipalsManage)
		require.ErrorIs(t, set(other, "s1", "other", authz.RightAdmin), authz.ErrForbidden)
		require.Equal(t, authz.Right(""), rightOf("s1", "other"))
	})
	t.Run("UnknownPrincipalIsNotFound", func(t *testing.T) {
		require.ErrorIs(t, set(op, "s1", "nobody", authz.RightRead), authz.ErrNotFound)
	})
}

// TestMayListMembers: every member of a space lists its members through a
// token that acts on the space; a principal without a right there, a token
// restricted to another space or only for the server's state does not.
func TestMayListMembers(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t)
	grant := func(t *testing.T, space, principal string, right authz.Right) {
		t.Helper()
		require.NoError(t, authz.Grant(ctx, db.Pool, &authz.GrantParams{Space: space, Principal: principal, Right: right}))
	}
	may := func(s *authz.Subject, space string) error { return authz.MayListMembers(ctx, db.Pool, s, space) }

	t.Run("EveryRightWithAScopeForTheSpace", func(t *testing.T) {
		for _, r := range []authz.Right{authz.RightRead, authz.RightWrite, authz.RightAdmin} {
			for i, scope := range []string{authz.ScopeEventsRead, "events:read@s1", "webhooks:manage@s1", authz.ScopePushManage,
				authz.ScopeEventsWrite, authz.ScopePrincipalsManage} {
				s := subject(t, db, fmt.Sprintf("m-%s-%d", r, i), nil, scope)
				grant(t, "s1", s.Principal, r)
				require.NoError(t, may(s, "s1"), "%s with %s", r, scope)
			}
		}
	})
	t.Run("NoRightOnTheSpaceIsForbidden", func(t *testing.T) {
		for i, scopes := range [][]string{{authz.ScopeEventsRead}, {authz.ScopePrincipalsManage, authz.ScopeEventsRead}} {
			s := subject(t, db, fmt.Sprintf("outsider-%d", i), nil, scopes...)
			grant(t, "s2", s.Principal, authz.RightAdmin)
			err := may(s, "s1")
			require.ErrorIs(t, err, authz.ErrForbidden, scopes)
			require.ErrorContains(t, err, "no right on space")
		}
	})
	t.Run("ATokenThatDoesNotActOnTheSpaceIsForbidden", func(t *testing.T) {
		for i, scopes := range [][]string{{"events:read@s2"}, {authz.ScopeOpsRead}, {}} {
			s := subject(t, db, fmt.Sprintf("narrow-%d", i), nil, scopes...)
			grant(t, "s1", s.Principal, authz.RightAdmin)
			err := may(s, "s1")
			require.ErrorIs(t, err, authz.ErrForbidden, scopes)
			require.ErrorContains(t, err, "needs a token with a scope for that space")
		}
	})
	t.Run("ASpaceWithoutMembersOnlyWithPrincipalsManage", func(t *testing.T) {
		op := subject(t, db, "op", nil, authz.ScopePrincipalsManage)
		require.NoError(t, may(op, "empty"), "it may set the first member")
		reader := subject(t, db, "reader", nil, authz.ScopeEventsRead)
		require.ErrorIs(t, may(reader, "empty"), authz.ErrForbidden)
	})
}

// TestSetMember_OneFirstMember races pairs of holders of principals:manage,
// each making itself admin of the same new space: exactly one may, since
// only the first grant on a space needs no right there.
func TestSetMember_OneFirstMember(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t)
	a := subject(t, db, "a", nil, authz.ScopePrincipalsManage)
	b := subject(t, db, "b", nil, authz.ScopePrincipalsManage)
	for i := range 30 {
		space := fmt.Sprintf("new-%d", i)
		var wg gosync.WaitGroup
		errs := make([]error, 2)
		for j, s := range []*authz.Subject{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[j] = authz.SetMember(ctx, db.Pool, &authz.SetMemberParams{By: s, Space: space, Principal: s.Principal, Right: authz.RightAdmin})
			}()
		}
		wg.Wait()
		ms, err := authz.Members(ctx, db.Pool, &authz.MembersParams{Space: space, Limit: 10})
		require.NoError(t, err)
		require.Len(t, ms, 1, "space %s: errors %v", space, errs)
		require.True(t, (errs[0] == nil) != (errs[1] == nil), "space %s: errors %v", space, errs)
	}
}

func TestDirectory(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t)
	q := db.Pool
	for _, id := range []string{"carol", "bob"} {
		require.NoError(t, authz.CreatePrincipal(ctx, q, id, authz.KindUser))
	}
	p, err := authz.GetPrincipal(ctx, q, "app1")
	require.NoError(t, err)
	require.Equal(t, authz.KindApp, p.Kind)
	_, err = authz.GetPrincipal(ctx, q, "nobody")
	require.ErrorIs(t, err, authz.ErrNotFound)

	first, err := authz.ListPrincipals(ctx, q, &authz.ListPrincipalsParams{Limit: 2})
	require.NoError(t, err)
	rest, err := authz.ListPrincipals(ctx, q, &authz.ListPrincipalsParams{AfterID: first[1].ID, Limit: 10})
	require.NoError(t, err)
	var ids []string
	for _, p := range append(first, rest...) {
		ids = append(ids, p.ID)
	}
	require.Equal(t, []string{"alice", "app1", "bob", "carol"}, ids)

	t1, _, err := authz.CreateToken(ctx, q, &authz.CreateTokenParams{Principal: "bob", Name: "one", Scopes: []string{authz.ScopeEventsRead}})
	require.NoError(t, err)
	t2, _, err := authz.CreateToken(ctx, q, &authz.CreateTokenParams{Principal: "bob", Name: "two"})
	require.NoError(t, err)
	require.NoError(t, authz.RevokeToken(ctx, q, t1.ID))
	toks, err := authz.ListTokens(ctx, q, &authz.ListTokensParams{Principal: "bob", Limit: 10})
	require.NoError(t, err)
	require.Len(t, toks, 2)
	require.Equal(t, t1.ID, toks[0].ID)
	require.NotNil(t, toks[0].RevokedAt)
	next, err := authz.ListTokens(ctx, q, &authz.ListTokensParams{Principal: "bob", AfterID: t1.ID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, next, 1)
	require.Equal(t, t2.ID, next[0].ID)

	for _, sp := range []string{"s2", "s1"} {
		require.NoError(t, authz.Grant(ctx, q, &authz.GrantParams{Space: sp, Principal: "bob", Right: authz.RightRead}))
	}
	ms, err := authz.Memberships(ctx, q, "bob")
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, "s1", ms[0].Space)
	require.Equal(t, authz.RightRead, ms[0].Right)
}
