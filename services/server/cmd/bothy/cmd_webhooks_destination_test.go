package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWebhooksDestination_CLI: --destination (JSON, or @file to keep the
// password off the command line) makes a broker subscription, which every
// output shows with the password masked; update replaces it, and --url
// makes the destination http again.
func TestWebhooksDestination_CLI(t *testing.T) {
	t.Parallel()
	environ, sub := cliWebhook(t)
	id := sub["id"].(string)
	file := filepath.Join(t.TempDir(), "dest.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"kind":"rabbitmq","url":"amqp://bob:file-pw@127.0.0.1:5672/","exchange":"events"}`), 0o600))

	code, stdout, stderr := runCLI(t, environ, "webhooks", "update", id, "--destination", "@"+file)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `rabbitmq`)
	require.Contains(t, stdout, `amqp://bob:********@127.0.0.1:5672/`)
	require.NotContains(t, stdout, "file-pw")

	code, stdout, stderr = runCLI(t, environ, "webhooks", "list")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"kind":"rabbitmq"`)
	require.NotContains(t, stdout, "file-pw")

	code, _, stderr = runCLI(t, environ, "webhooks", "create", "--owner", "alice", "--space", "s1", "--max-batch", "10",
		"--destination", `{"kind":"rabbitmq","url":"amqp://bob:pw@127.0.0.1:5672/","exchange":"events"}`)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "max_batch")

	code, _, stderr = runCLI(t, environ, "webhooks", "create", "--owner", "alice", "--space", "s1", "--destination", `{"kind":"rabbitmq"`)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--destination: not JSON")

	code, stdout, stderr = runCLI(t, environ, "webhooks", "update", id, "--url", "http://127.0.0.1:9/back", "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"kind": "http"`)
	require.Contains(t, stdout, `"url": "http://127.0.0.1:9/back"`)
}
