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
	p := br.signIn(token)
	var id string
	for _, ck := range p.header.Values("Set-Cookie") {
		if v, ok := strings.CutPrefix(ck, "bothy_console="); ok {
			id, _, _ = strings.Cut(v, ";")
		}
	}
	require.NotEmpty(t, id)

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
		// The old cookie, sent again, is no session.
		req, err := http.NewRequest(http.MethodGet, b.base+"/console/subscriptions", nil)
		require.NoError(t, err)
		req.AddCookie(&http.Cookie{Name: "bothy_console", Value: id})
		res := b.browser(t).do(req)
		require.Equal(t, http.StatusSeeOther, res.status)
		require.True(t, strings.HasPrefix(res.header.Get("Location"), "/console/sign-in"))
	})
}
