package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TestWebhooksPolicyFlags_CLI: the retry schedule flags set the
// subscription's own values and 0 returns them to the server's;
// --auto-recover=false turns probing off; a probing subscription is
// shown as such by list and list --json.
func TestWebhooksPolicyFlags_CLI(t *testing.T) {
	t.Parallel()
	environ, sub := cliWebhook(t, "--policy", "ordered", "--retry-base", "500ms", "--retry-budget", "2h", "--auto-recover")
	require.Equal(t, "ordered", sub["policy"])
	require.EqualValues(t, 0.5, sub["retry_base_seconds"])
	require.EqualValues(t, 7200, sub["retry_budget_seconds"])
	require.NotContains(t, sub, "retry_max_seconds", "the server's")
	require.Equal(t, true, sub["auto_recover"])
	id := sub["id"].(string)

	updated := func(args ...string) map[string]any {
		t.Helper()
		code, stdout, stderr := runCLI(t, environ, append([]string{"webhooks", "update", id, "--json"}, args...)...)
		require.Equal(t, 0, code, stderr)
		var out map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &out))
		return out
	}
	got := updated("--retry-base", "0", "--auto-recover=false")
	require.NotContains(t, got, "retry_base_seconds", "0: the server's again")
	require.EqualValues(t, 7200, got["retry_budget_seconds"], "unchanged")
	require.Equal(t, false, got["auto_recover"])
	require.Equal(t, "ordered", got["policy"], "unchanged")

	// The sender disables a failing subscription and starts probing it;
	// here the database is set as it would.
	updated("--policy", "ordered", "--auto-recover")
	pool, err := pgxpool.New(context.Background(), strings.TrimPrefix(environ[0], "BOTHY_DATABASE_URL="))
	require.NoError(t, err)
	defer pool.Close()
	for _, q := range []string{
		`UPDATE webhook_subscriptions SET status = 'disabled', disabled_cause = 'failing', disabled_at = now() WHERE id = $1`,
		`UPDATE webhook_subscriptions SET probing = true WHERE id = $1`,
	} {
		_, err := pool.Exec(context.Background(), q, id)
		require.NoError(t, err)
	}
	code, stdout, stderr := runCLI(t, environ, "webhooks", "list")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "disabled (failing, probing)")
	code, stdout, stderr = runCLI(t, environ, "webhooks", "list", "--json")
	require.Equal(t, 0, code, stderr)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &list))
	require.Equal(t, true, list[0]["probing"])

	require.Equal(t, false, updated("--auto-recover=false")["probing"], "turning auto_recover off ends probing")
}

// TestWebhooksDeliveriesDead_CLI: webhooks deliveries --status dead lists
// a subscription's dead letters, with why they died, and no other
// delivery.
func TestWebhooksDeliveriesDead_CLI(t *testing.T) {
	t.Parallel()
	environ, sub := cliWebhook(t, "--policy", "ordered_dead_letter")
	id := sub["id"].(string)
	pool, err := pgxpool.New(t.Context(), dbURL(environ))
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(t.Context(), `INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id)
		SELECT $1, g, gen_random_uuid() FROM generate_series(1, 4) g`, id)
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), `UPDATE webhook_deliveries SET status = 'dead', finished_at = now(),
		last_error = 'retry budget 1s exhausted after 3 attempts' WHERE subscription_id = $1 AND event_seq = 2`, id)
	require.NoError(t, err)

	code, stdout, stderr := runCLI(t, environ, "webhooks", "deliveries", id, "--status", "dead", "--json")
	require.Equal(t, 0, code, stderr)
	var dead []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &dead))
	require.Len(t, dead, 1)
	require.EqualValues(t, 2, dead[0]["seq"])
	require.Equal(t, "dead", dead[0]["status"])
	require.Equal(t, "retry budget 1s exhausted after 3 attempts", dead[0]["last_error"])
	code, stdout, stderr = runCLI(t, environ, "webhooks", "deliveries", id, "--status", "dead")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "retry budget 1s exhausted")
	require.Equal(t, 2, strings.Count(stdout, "\n"), "the header and one row: %s", stdout)
}
