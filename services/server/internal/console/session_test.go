package console_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// TestConsole_Sessions: the database keeps only the hash of a session id,
// and signing out ends the session for good.
func TestConsole_Sessions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	br := b.browser(t)
	id := sessionID(t, br.signIn(token))

	t.Run("OnlyTheHashIsStored", func(t *testing.T) {
		sum := sha256.Sum256([]byte(id))
		var n int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM console_sessions WHERE id_hash = $1 AND principal = 'alice'`, sum[:]).Scan(&n))
		require.Equal(t, 1, n)
		raw, err := base64.RawURLEncoding.DecodeString(id)
		require.NoError(t, err)
		require.NoError(t, b.db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM console_sessions WHERE id_hash = $1`, raw).Scan(&n))
		require.Zero(t, n, "the id itself is not stored")
	})
	t.Run("SignOutEndsIt", func(t *testing.T) {
		csrf := br.csrf("/console/subscriptions")
		p := br.post("/console/sign-out", url.Values{"csrf": {csrf}})
		require.Equal(t, http.StatusSeeOther, p.status, p.body)
		require.False(t, b.sessionValid(t, id), "the old cookie, sent again, is no session")
	})
}

// TestConsole_SignInAgainEndsThePreviousSession: a browser that signs in
// again gets a new session id, and the one its cookie held before stops
// being valid (someone who copied it cannot go on using it).
func TestConsole_SignInAgainEndsThePreviousSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	br := b.browser(t)
	first := sessionID(t, br.signIn(token))
	second := sessionID(t, br.signIn(token))
	require.NotEqual(t, first, second)
	require.False(t, b.sessionValid(t, first), "the replaced session still works")
	require.True(t, b.sessionValid(t, second))
}

// sessionID returns the session id a sign-in's answer sets as a cookie.
func sessionID(t *testing.T, p *page) string {
	t.Helper()
	var id string
	for _, ck := range p.header.Values("Set-Cookie") {
		if v, ok := strings.CutPrefix(ck, "bothy_console="); ok {
			id, _, _ = strings.Cut(v, ";")
		}
	}
	require.NotEmpty(t, id)
	return id
}

// sessionValid says whether a fresh browser holding only the session id
// reaches the subscriptions page (rather than being sent to sign in).
func (b *testBundle) sessionValid(t *testing.T, id string) bool {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.base+"/console/subscriptions", nil)
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: "bothy_console", Value: id})
	res := b.browser(t).do(req)
	if res.status == http.StatusOK {
		return true
	}
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.True(t, strings.HasPrefix(res.header.Get("Location"), "/console/sign-in"))
	return false
}
