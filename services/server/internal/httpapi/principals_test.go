package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// operatorScopes are those of the bootstrap token of a tenant-provisioning
// backend: principals:manage and everything it may hand out.
var operatorScopes = append([]string{authz.ScopePrincipalsManage}, allScopes...)

// TestAPI_TenantMadeOverHTTPOnly starts from one operator token made by the
// bootstrap CLI (here: the same authz calls) and does the rest over HTTP:
// a new space, a new principal, its right there and its token, which then
// appends to and reads the space.
func TestAPI_TenantMadeOverHTTPOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	op := b.principal(t, "op", "", "", operatorScopes...)

	r := b.do(t, "POST", "/v1/principals", op, `{"id":"bob","kind":"app"}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	require.Equal(t, "/v1/principals/bob", r.header.Get("Location"))
	require.Equal(t, "app", r.json(t)["kind"])
	r = b.do(t, "POST", "/v1/principals", op, `{"id":"bob","kind":"app"}`)
	require.Equal(t, http.StatusOK, r.status, "a retry gets the principal: %s", r.body)
	b.do(t, "POST", "/v1/principals", op, `{"id":"bob"}`).problem(t, http.StatusConflict)

	r = b.do(t, "PUT", "/v1/spaces/acme/members/op", op, `{"right":"admin"}`)
	require.Equal(t, http.StatusOK, r.status, "the first member of a new space: %s", r.body)
	r = b.do(t, "PUT", "/v1/spaces/acme/members/bob", op, `{"right":"write"}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, "write", r.json(t)["right"])

	r = b.do(t, "POST", "/v1/principals/bob/tokens", op, `{"scopes":["events:write@acme","events:read@acme"],"name":"bob's app"}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	tok := r.json(t)
	secret, _ := tok["secret"].(string)
	require.True(t, strings.HasPrefix(secret, "bothy_"), "the secret, once: %v", tok)

	r = b.do(t, "POST", "/v1/spaces/acme/events", secret, `{"events":[{"type":"order.placed","data":{"n":1}}]}`)
	require.Equal(t, http.StatusCreated, r.status, "bob appends with the token made over HTTP: %s", r.body)
	b.do(t, "POST", "/v1/spaces/other/events", secret, `{"events":[{"type":"order.placed"}]}`).problem(t, http.StatusForbidden)

	r = b.do(t, "GET", "/v1/principals/bob", secret, "")
	require.Equal(t, http.StatusOK, r.status, "bob reads itself: %s", r.body)
	spaces := r.json(t)["spaces"].([]any)
	require.Len(t, spaces, 1)
	require.Equal(t, "write", spaces[0].(map[string]any)["right"])

	r = b.do(t, "GET", "/v1/principals/bob/tokens", secret, "")
	require.Equal(t, http.StatusOK, r.status, "bob lists its tokens: %s", r.body)
	require.NotContains(t, string(r.body), secret[len(secret)-20:], "never a secret")
	require.NotContains(t, string(r.body), `"secret"`)
	toks := r.json(t)["tokens"].([]any)
	require.Len(t, toks, 1)
	require.Equal(t, tok["id"], toks[0].(map[string]any)["id"])
	require.Equal(t, "active", toks[0].(map[string]any)["status"])

	r = b.do(t, "GET", "/v1/spaces/acme/members", op, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Len(t, r.json(t)["members"].([]any), 2)

	require.Equal(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/spaces/acme/members/bob", op, "").status)
	b.do(t, "POST", "/v1/spaces/acme/events", secret, `{"events":[{"type":"order.placed"}]}`).problem(t, http.StatusForbidden)
	require.Equal(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/tokens/"+tok["id"].(string), op, "").status)
	b.do(t, "GET", "/v1/principals/bob", secret, "").problem(t, http.StatusUnauthorized)
}

// TestAPI_AdminCrossOver tries, as principals without the right to, every
// way across another principal's rights and tokens: each is 403 or 404 and
// changes nothing.
func TestAPI_AdminCrossOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	admin := b.principal(t, "admin", authz.RightAdmin, "s1", operatorScopes...)
	carol := b.principal(t, "carol", authz.RightWrite, "s1", allScopes...)
	// bob reads s1 and holds principals:manage, as a careless operator
	// might hand it out; bob2 reads s1 without it.
	bob := b.principal(t, "bob", authz.RightRead, "s1", operatorScopes...)
	bob2 := b.principal(t, "bob2", authz.RightRead, "s1", allScopes...)
	carolToken := tokenID(t, carol)

	rightOf := func(principal string) authz.Right {
		t.Helper()
		r, err := authz.RightOn(ctx, b.db.Pool, "s1", principal)
		require.NoError(t, err)
		return r
	}
	tokensOf := func(principal string) int {
		t.Helper()
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM tokens WHERE principal = $1 AND revoked_at IS NULL`, principal).Scan(&n))
		return n
	}

	t.Run("RaisingItsOwnRightIs403", func(t *testing.T) {
		for _, tok := range []string{bob, bob2} {
			b.do(t, "PUT", "/v1/spaces/s1/members/bob", tok, `{"right":"admin"}`).problem(t, http.StatusForbidden)
			b.do(t, "PUT", "/v1/spaces/s1/members/bob2", tok, `{"right":"write"}`).problem(t, http.StatusForbidden)
		}
		require.Equal(t, authz.RightRead, rightOf("bob"))
		require.Equal(t, authz.RightRead, rightOf("bob2"))
	})
	t.Run("GrantingAdminFromReadIs403", func(t *testing.T) {
		for _, tok := range []string{bob, bob2} {
			b.do(t, "PUT", "/v1/spaces/s1/members/carol", tok, `{"right":"admin"}`).problem(t, http.StatusForbidden)
			b.do(t, "DELETE", "/v1/spaces/s1/members/admin", tok, "").problem(t, http.StatusForbidden)
		}
		require.Equal(t, authz.RightWrite, rightOf("carol"))
		require.Equal(t, authz.RightAdmin, rightOf("admin"))
	})
	t.Run("AnAdminTokenWithoutPrincipalsManageChangesNoMember", func(t *testing.T) {
		carolAdmin := b.principal(t, "carol-admin", authz.RightAdmin, "s1", allScopes...)
		b.do(t, "PUT", "/v1/spaces/s1/members/bob", carolAdmin, `{"right":"admin"}`).problem(t, http.StatusForbidden)
		require.Equal(t, authz.RightRead, rightOf("bob"))
	})
	t.Run("MintingForAnotherIs404WithoutPrincipalsManage", func(t *testing.T) {
		before := tokensOf("carol")
		b.do(t, "POST", "/v1/principals/carol/tokens", bob2, `{"scopes":[]}`).problem(t, http.StatusNotFound)
		b.do(t, "POST", "/v1/principals/bob2/tokens", bob2, `{"scopes":[]}`).problem(t, http.StatusForbidden)
		require.Equal(t, before, tokensOf("carol"))
	})
	t.Run("MintingAScopeItLacksIs403", func(t *testing.T) {
		before := tokensOf("carol")
		narrow := b.principal(t, "narrow", "", "", authz.ScopePrincipalsManage, "events:read@s1")
		for _, s := range []string{authz.ScopeEventsRead, "events:read@s2", authz.ScopeOpsRead, authz.ScopeWebhooksManage} {
			d := b.do(t, "POST", "/v1/principals/carol/tokens", narrow, fmt.Sprintf(`{"scopes":[%q]}`, s)).problem(t, http.StatusForbidden)
			require.Contains(t, d, s)
		}
		require.Equal(t, before, tokensOf("carol"))
	})
	t.Run("ReadingAnothersTokensIs404", func(t *testing.T) {
		b.do(t, "GET", "/v1/principals/carol/tokens", bob2, "").problem(t, http.StatusNotFound)
		b.do(t, "GET", "/v1/principals/carol", bob2, "").problem(t, http.StatusNotFound)
		b.do(t, "GET", "/v1/principals", bob2, "").problem(t, http.StatusForbidden)
		b.do(t, "POST", "/v1/principals", bob2, `{"id":"mallory"}`).problem(t, http.StatusForbidden)
		_, err := authz.GetPrincipal(ctx, b.db.Pool, "mallory")
		require.ErrorIs(t, err, authz.ErrNotFound)
	})
	t.Run("RevokingAnothersTokenIs404", func(t *testing.T) {
		b.do(t, "DELETE", "/v1/tokens/"+carolToken, bob2, "").problem(t, http.StatusNotFound)
		require.Equal(t, http.StatusOK, b.do(t, "GET", "/v1/principals/carol", carol, "").status, "carol's token still works")
	})
	t.Run("ItsOwnTokensAreItsToListAndRevoke", func(t *testing.T) {
		r := b.do(t, "GET", "/v1/principals/bob2/tokens", bob2, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Len(t, r.json(t)["tokens"].([]any), 1)
		require.Equal(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/tokens/"+tokenID(t, bob2), bob2, "").status)
		b.do(t, "GET", "/v1/principals/bob2", bob2, "").problem(t, http.StatusUnauthorized)
	})
	t.Run("AnOperatorReadsAndRevokesAnyToken", func(t *testing.T) {
		r := b.do(t, "GET", "/v1/principals/carol/tokens", admin, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, http.StatusNoContent, b.do(t, "DELETE", "/v1/tokens/"+carolToken, admin, "").status)
		b.do(t, "GET", "/v1/principals/carol", carol, "").problem(t, http.StatusUnauthorized)
	})
}

// TestAPI_MembersListedByMembers: every member of a space lists its
// members, whatever its right, with a token that acts on the space;
// changing them stays an admin's. Across: a principal without a right on
// the space, or a token for another space or for the server's state only,
// gets 403 and sees no member.
func TestAPI_MembersListedByMembers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.principal(t, "admin", authz.RightAdmin, "s1", operatorScopes...)
	reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
	readerHere := b.principal(t, "reader-here", authz.RightRead, "s1", "events:read@s1")
	writer := b.principal(t, "writer", authz.RightWrite, "s1", authz.ScopeWebhooksManage)
	readerOperator := b.principal(t, "reader-op", authz.RightRead, "s1", operatorScopes...)
	readerThere := b.principal(t, "reader-there", authz.RightRead, "s1", "events:read@s2")
	readerOps := b.principal(t, "reader-ops", authz.RightRead, "s1", authz.ScopeOpsRead)
	outsider := b.principal(t, "outsider", authz.RightAdmin, "s2", allScopes...)
	operator := b.principal(t, "operator", authz.RightAdmin, "s2", operatorScopes...)
	inS1 := []string{"admin", "reader", "reader-here", "reader-op", "reader-ops", "reader-there", "writer"}

	t.Run("EveryMemberListsThemAll", func(t *testing.T) {
		for _, tok := range []string{reader, readerHere, writer, readerOperator} {
			got := b.walk(t, "/v1/spaces/s1/members?limit=2", tok, "members", "principal", func() {})
			require.Equal(t, inS1, got)
		}
	})
	t.Run("ListingChangesNothingAndChangingStaysAnAdmins", func(t *testing.T) {
		for _, tok := range []string{reader, readerHere, writer, readerOperator} {
			b.do(t, "PUT", "/v1/spaces/s1/members/outsider", tok, `{"right":"read"}`).problem(t, http.StatusForbidden)
			b.do(t, "DELETE", "/v1/spaces/s1/members/admin", tok, "").problem(t, http.StatusForbidden)
		}
		got := b.walk(t, "/v1/spaces/s1/members?limit=50", reader, "members", "principal", func() {})
		require.Equal(t, inS1, got)
	})
	t.Run("NoRightOnTheSpaceIs403", func(t *testing.T) {
		for _, tok := range []string{outsider, operator} {
			r := b.do(t, "GET", "/v1/spaces/s1/members", tok, "")
			require.Contains(t, r.problem(t, http.StatusForbidden), "no right on space")
			require.NotContains(t, string(r.body), "reader")
		}
	})
	t.Run("ATokenThatDoesNotActOnTheSpaceIs403", func(t *testing.T) {
		for _, tok := range []string{readerThere, readerOps} {
			r := b.do(t, "GET", "/v1/spaces/s1/members", tok, "")
			require.Contains(t, r.problem(t, http.StatusForbidden), "scope for that space")
			require.NotContains(t, string(r.body), "writer")
		}
	})
	t.Run("AnOperatorListsASpaceWithoutMembers", func(t *testing.T) {
		r := b.do(t, "GET", "/v1/spaces/new-space/members", operator, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Empty(t, r.json(t)["members"])
		b.do(t, "GET", "/v1/spaces/new-space/members", outsider, "").problem(t, http.StatusForbidden)
	})
}

// tokenID is the id part of a bearer secret bothy_<id>_<secret>.
func tokenID(t *testing.T, bearer string) string {
	t.Helper()
	parts := strings.SplitN(bearer, "_", 3)
	require.Len(t, parts, 3)
	h := parts[1]
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func TestAPI_AdminListsWalkEveryItemOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	op := b.principal(t, "op", authz.RightAdmin, "s1", operatorScopes...)
	for i := range 5 {
		id := fmt.Sprintf("p%d", i)
		require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/principals", op, fmt.Sprintf(`{"id":%q}`, id)).status)
		require.Equal(t, http.StatusOK, b.do(t, "PUT", "/v1/spaces/s1/members/"+id, op, `{"right":"read"}`).status)
		require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/principals/p0/tokens", op, `{"scopes":[]}`).status)
	}
	require.Len(t, once(t, b.walk(t, "/v1/principals?limit=2", op, "principals", "id", func() {})), 6)
	require.Len(t, once(t, b.walk(t, "/v1/spaces/s1/members?limit=2", op, "members", "principal", func() {})), 6)
	require.Len(t, once(t, b.walk(t, "/v1/principals/p0/tokens?limit=2", op, "tokens", "id", func() {})), 5)
	b.do(t, "GET", "/v1/principals?cursor="+"eyJsIjoibWVtYmVycyJ9", op, "").problem(t, http.StatusBadRequest)
}
