// Package apptest runs the real server, as "bothy server" builds it, in
// tests of the packages that serve through it (the HTTP API, the console,
// the browser tests).
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
)

// AllScopes are the scopes of a token that may do everything on the
// spaces its principal has rights on.
var AllScopes = []string{authz.ScopeEventsRead, authz.ScopeEventsWrite, authz.ScopeWebhooksManage, authz.ScopePushManage}

// Flags returns the configuration tests start from: the database at dbURL,
// role, a loopback listener on a free port, webhook targets on loopback
// allowed, quick consumer polling and River fetching, and a short shutdown.
// Callers add or change keys before Start.
func Flags(dbURL, role string) map[string]string {
	return map[string]string{
		"database.url":                   dbURL,
		"server.role":                    role,
		"server.listen_addr":             "127.0.0.1:0",
		"webhooks.allow_private_targets": "true",
		"consumer.poll_interval":         "100ms",
		"river.fetch_cooldown":           "20ms",
		"river.fetch_poll_interval":      "100ms",
		"server.shutdown_timeout":        "5s",
	}
}

// Start builds the server from flags with every feature (app.Features),
// discarding its logs, runs it until the test ends and returns its base
// URL.
func Start(t testing.TB, flags map[string]string) string {
	t.Helper()
	cfg, err := config.Load("", nil, flags)
	require.NoError(t, err)
	return Run(t, app.NewServer(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), app.Features(cfg)))
}

// Run runs srv until the test ends, then stops it and requires a clean
// stop, and returns its base URL once it listens.
func Run(t testing.TB, srv *app.Server) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Error("server did not stop")
		}
	})
	actx, acancel := context.WithTimeout(ctx, 20*time.Second)
	defer acancel()
	addr, err := srv.Addr(actx)
	require.NoError(t, err)
	return "http://" + addr.String()
}

// Principal creates the user principal id with right on space (none if
// right is "") and returns the bearer secret of a new token with scopes.
func Principal(t testing.TB, q authz.Querier, id string, right authz.Right, space string, scopes []string) string {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, authz.CreatePrincipal(ctx, q, id, authz.KindUser))
	if right != "" {
		require.NoError(t, authz.Grant(ctx, q, &authz.GrantParams{Space: space, Principal: id, Right: right}))
	}
	if scopes == nil {
		scopes = []string{}
	}
	_, bearer, err := authz.CreateToken(ctx, q, &authz.CreateTokenParams{Principal: id, Scopes: scopes})
	require.NoError(t, err)
	return bearer
}

// CallAPI sends body (if not nil) as JSON to the API at base with token,
// decodes a 2xx answer into out (if not nil) and returns the status.
func CallAPI(t testing.TB, base, method, path, token string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, base+path, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	if out != nil && res.StatusCode < 300 {
		require.NoError(t, json.Unmarshal(raw, out), "%s %s: %s", method, path, raw)
	}
	return res.StatusCode
}
