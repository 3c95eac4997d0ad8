package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

func TestAPI_PortalLinks(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	b := &testBundle{db: db, base: startServer(t, db.URL, "all",
		"console.enabled", "true", "console.key", "portal-key-for-the-api-tests-0123456789")}
	admin := b.principal(t, "owner", authz.RightAdmin, "acme", authz.ScopeWebhooksManage)
	member := b.principal(t, "carol", authz.RightRead, "acme", authz.ScopeWebhooksManage)
	b.principal(t, "dave", "", "")

	t.Run("AnAdminIssuesOneForAMember", func(t *testing.T) {
		before := time.Now().Truncate(time.Second)
		res := b.do(t, "POST", "/v1/portal-links", admin, `{"principal":"carol","space":"acme","expires_in_seconds":60}`)
		after := time.Now()
		require.Equal(t, http.StatusCreated, res.status, "body: %s", res.body)
		v := res.json(t)
		require.True(t, strings.HasPrefix(v["url"].(string), b.base+"/console/portal?token="), v["url"])
		require.True(t, strings.HasPrefix(v["path"].(string), "/console/portal?token="))
		exp, err := time.Parse(time.RFC3339, v["expires_at"].(string))
		require.NoError(t, err)
		require.False(t, exp.Before(before.Add(time.Minute)), "expires_at %s", exp)
		require.False(t, exp.After(after.Add(time.Minute)), "expires_at %s", exp)
	})
	t.Run("AMemberIssuesOneForItself", func(t *testing.T) {
		res := b.do(t, "POST", "/v1/portal-links", member, `{"principal":"carol","space":"acme"}`)
		require.Equal(t, http.StatusCreated, res.status, "body: %s", res.body)
	})
	t.Run("AMemberCannotIssueOneForAnother", func(t *testing.T) {
		b.do(t, "POST", "/v1/portal-links", member, `{"principal":"owner","space":"acme"}`).problem(t, http.StatusForbidden)
	})
	t.Run("NotOnASpaceTheCallerCannotManage", func(t *testing.T) {
		b.do(t, "POST", "/v1/portal-links", admin, `{"principal":"owner","space":"other"}`).problem(t, http.StatusForbidden)
	})
	t.Run("NotForAPrincipalWithoutARight", func(t *testing.T) {
		b.do(t, "POST", "/v1/portal-links", admin, `{"principal":"dave","space":"acme"}`).problem(t, http.StatusUnprocessableEntity)
	})
	t.Run("RefusesALongLife", func(t *testing.T) {
		b.do(t, "POST", "/v1/portal-links", admin, `{"principal":"carol","space":"acme","expires_in_seconds":7200}`).
			problem(t, http.StatusUnprocessableEntity)
	})
}

func TestAPI_PortalLinksNeedTheConsole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admin := b.principal(t, "owner", authz.RightAdmin, "acme", authz.ScopeWebhooksManage)
	detail := b.do(t, "POST", "/v1/portal-links", admin, `{"principal":"owner","space":"acme"}`).problem(t, http.StatusNotFound)
	require.Contains(t, detail, "console.enabled")
}

// TestAPI_PortalLinksFromThePublicURL: with console.public_url set, links
// are built from it, not from the request's Host or a client's
// X-Forwarded-Proto.
func TestAPI_PortalLinksFromThePublicURL(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	b := &testBundle{db: db, base: startServer(t, db.URL, "api",
		"console.enabled", "true", "console.key", "portal-key-for-the-api-tests-0123456789",
		"console.public_url", "https://hooks.example.com/bothy/")}
	admin := b.principal(t, "owner", authz.RightAdmin, "acme", authz.ScopeWebhooksManage)
	req, err := http.NewRequest("POST", b.base+"/v1/portal-links", strings.NewReader(`{"principal":"owner","space":"acme"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+admin)
	req.Header.Set("X-Forwarded-Proto", "http")
	res := send(t, req)
	require.Equal(t, http.StatusCreated, res.status, "body: %s", res.body)
	v := res.json(t)
	require.True(t, strings.HasPrefix(v["url"].(string), "https://hooks.example.com/bothy/console/portal?token="), v["url"])
	require.Equal(t, "https://hooks.example.com/bothy"+v["path"].(string), v["url"])
}
