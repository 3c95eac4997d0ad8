package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWebhooksPolicy_CLI(t *testing.T) {
	t.Parallel()
	environ, sub := cliWebhook(t, "--policy", "unordered", "--max-in-flight", "20", "--max-rps", "50", "--retry-max", "10m")
	require.Equal(t, "unordered", sub["policy"])
	require.EqualValues(t, 20, sub["max_in_flight"])
	require.EqualValues(t, 50, sub["max_requests_per_second"])
	require.EqualValues(t, 600, sub["retry_max_seconds"])
	require.NotContains(t, sub, "retry_base_seconds", "the server's")
	id := sub["id"].(string)

	code, stdout, stderr := runCLI(t, environ, "webhooks", "update", id, "--policy", "ordered", "--auto-recover", "--max-rps", "0")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "policy ordered,auto-recover,max 10m0s")

	code, stdout, stderr = runCLI(t, environ, "webhooks", "list")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "POLICY")
	require.Contains(t, stdout, "ordered,auto-recover,max 10m0s")
	code, stdout, stderr = runCLI(t, environ, "webhooks", "list", "--json")
	require.Equal(t, 0, code, stderr)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &list))
	require.Equal(t, true, list[0]["auto_recover"])
	require.NotContains(t, list[0], "max_in_flight")

	code, _, stderr = runCLI(t, environ, "webhooks", "update", id, "--max-in-flight", "5")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "max_in_flight: only with policy unordered")
	code, _, stderr = runCLI(t, environ, "webhooks", "update", id, "--retry-budget", "168h")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "must be below sync.event_retention")
}
