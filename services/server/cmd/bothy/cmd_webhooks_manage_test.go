package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

// cliWebhook creates principal alice with admin on s1 and a subscription of
// hers with the given extra create flags, and returns the environment and
// the subscription as --json prints it.
func cliWebhook(t *testing.T, extra ...string) ([]string, map[string]any) {
	t.Helper()
	db := dbtest.NewDB(t)
	environ := []string{"BOTHY_DATABASE_URL=" + db.URL, "BOTHY_WEBHOOKS_ALLOW_PRIVATE_TARGETS=true"}
	for _, args := range [][]string{
		{"authz", "principal", "alice"},
		{"authz", "grant", "--space", "s1", "--principal", "alice", "--right", "admin"},
	} {
		code, _, stderr := runCLI(t, environ, args...)
		require.Equal(t, 0, code, stderr)
	}
	code, stdout, stderr := runCLI(t, environ, append([]string{"webhooks", "create", "--owner", "alice", "--space", "s1",
		"--url", "http://127.0.0.1:9/hook", "--json"}, extra...)...)
	require.Equal(t, 0, code, stderr)
	var sub map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &sub))
	return environ, sub
}

func TestWebhooksHeaders_CLI(t *testing.T) {
	t.Parallel()
	environ, sub := cliWebhook(t, "--header", "Authorization: Bearer cli-secret-0123456789", "--header", "X-Tenant: acme-tenant")
	require.Equal(t, map[string]any{"Authorization": "********", "X-Tenant": "********"}, sub["headers"], "create prints the values masked")
	id := sub["id"].(string)

	code, stdout, stderr := runCLI(t, environ, "webhooks", "update", id, "--header", "X-Region: eu-west-1", "--remove-header", "x-tenant")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "headers Authorization: ********, X-Region: ********")
	require.NotContains(t, stdout, "cli-secret")

	code, stdout, stderr = runCLI(t, environ, "webhooks", "list", "--json")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "cli-secret")
	require.Contains(t, stdout, `"X-Region": "********"`)

	code, _, stderr = runCLI(t, environ, "webhooks", "update", id, "--header", "Host: internal")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "headers.Host: this header cannot be set")
	code, _, stderr = runCLI(t, environ, "webhooks", "update", id, "--header", "no colon")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `want "Name: value"`)
	code, _, stderr = runCLI(t, environ, "webhooks", "update", id)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "nothing to change")
}

func TestWebhooksDelete_CLI(t *testing.T) {
	t.Parallel()
	environ, sub := cliWebhook(t)
	id := sub["id"].(string)
	code, stdout, stderr := runCLI(t, environ, "events", "emit", "--space", "s1", "--count", "2")
	require.Equal(t, 0, code, stderr, stdout)

	code, stdout, stderr = runCLI(t, environ, "webhooks", "delete", id, "--json")
	require.Equal(t, 0, code, stderr)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.Equal(t, map[string]any{"id": id, "deleted": true, "deliveries": 0.0}, out)

	code, stdout, stderr = runCLI(t, environ, "webhooks", "list", "--json")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "[]", strings.TrimSpace(stdout))
	code, _, stderr = runCLI(t, environ, "webhooks", "delete", id)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "webhook subscription not found")
}

func TestWebhooksTest_CLI(t *testing.T) {
	t.Parallel()
	environ, sub := cliWebhook(t)
	id := sub["id"].(string)
	url, rv := recvtest.Endpoint(t, func(a *webhookstest.Arrival) webhookstest.Answer {
		if a.Header.Get("X-Fail") != "" {
			return webhookstest.Answer{Status: http.StatusBadGateway}
		}
		return webhookstest.Answer{Status: http.StatusNoContent}
	})
	require.NoError(t, rv.SetSecret(sub["secret"].(string)))
	seen := func() (http.Header, error) {
		as := rv.Arrivals()
		require.NotEmpty(t, as)
		return as[len(as)-1].Header, as[len(as)-1].SigErr
	}
	code, _, stderr := runCLI(t, environ, "webhooks", "update", id, "--url", url)
	require.Equal(t, 0, code, stderr)

	code, stdout, stderr := runCLI(t, environ, "webhooks", "test", id)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "receiver answered 204 in ")
	h, err := seen()
	require.NoError(t, err, "the receiver verifies the signature")
	require.Contains(t, stdout, h.Get("webhook-id"))

	code, _, stderr = runCLI(t, environ, "webhooks", "update", id, "--header", "X-Fail: yes")
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr = runCLI(t, environ, "webhooks", "test", id, "--json")
	require.Equal(t, 1, code, "a failing receiver fails the command")
	require.Contains(t, stderr, "receiver answered 502 Bad Gateway")
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.EqualValues(t, 502, out["status_code"])
	require.Equal(t, false, out["ok"])
}

// cliWalk runs args with --limit and every --cursor announced on stderr
// until none is, and returns the ids of what each page printed as JSON.
func cliWalk(t *testing.T, environ []string, idKey string, args ...string) []string {
	t.Helper()
	var ids []string
	var cursor []string
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100)
		code, stdout, stderr := runCLI(t, environ, append(append(args, "--json"), cursor...)...)
		require.Equal(t, 0, code, stderr)
		var items []map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &items))
		for _, it := range items {
			ids = append(ids, fmt.Sprint(it[idKey]))
		}
		next, ok := strings.CutPrefix(strings.TrimSpace(stderr), "more follow: --cursor ")
		if !ok {
			return ids
		}
		cursor = []string{"--cursor", next}
	}
}

func TestWebhooksPages_CLI(t *testing.T) {
	t.Parallel()
	environ, sub := cliWebhook(t)
	all := []string{sub["id"].(string)}
	for range 4 {
		code, stdout, stderr := runCLI(t, environ, "webhooks", "create", "--owner", "alice", "--space", "s1", "--url", "http://127.0.0.1:9/hook", "--json")
		require.Equal(t, 0, code, stderr)
		var s map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &s))
		all = append(all, s["id"].(string))
	}
	require.Equal(t, all, cliWalk(t, environ, "id", "webhooks", "list", "--limit", "2"), "every subscription once, in creation order")

	db := dbURL(environ)
	pool, err := pgxpool.New(t.Context(), db)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(t.Context(), `INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id)
		SELECT $1, g, gen_random_uuid() FROM generate_series(1, 7) g`, all[0])
	require.NoError(t, err)
	require.Equal(t, []string{"7", "6", "5", "4", "3", "2", "1"}, cliWalk(t, environ, "seq", "webhooks", "deliveries", all[0], "--limit", "3"))

	code, _, stderr := runCLI(t, environ, "webhooks", "list", "--cursor", "garbage")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "not a cursor of this list")
}

// dbURL returns BOTHY_DATABASE_URL of environ.
func dbURL(environ []string) string {
	for _, e := range environ {
		if v, ok := strings.CutPrefix(e, "BOTHY_DATABASE_URL="); ok {
			return v
		}
	}
	return ""
}
