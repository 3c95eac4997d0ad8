package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func runCLI(t *testing.T, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &env{stdout: &out, stderr: &errOut, environ: environ})
	return code, out.String(), errOut.String()
}

func TestServer_RefusesBadConfiguration(t *testing.T) {
	t.Parallel()

	t.Run("AlertAfterNotBelowRetention", func(t *testing.T) {
		t.Parallel()
		code, _, stderr := runCLI(t, nil, "server", "--consumer.pending_alert_after=200h", "--sync.event_retention=168h")
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "consumer.pending_alert_after (200h0m0s) must be strictly below sync.event_retention (168h0m0s)")
	})
	t.Run("BadValueFromTheEnvironmentNamesKeyAndSource", func(t *testing.T) {
		t.Parallel()
		code, _, stderr := runCLI(t, []string{"BOTHY_CONSUMER_BATCH_SIZE=lots"}, "server")
		require.Equal(t, 1, code)
		require.Contains(t, stderr, `consumer.batch_size (from env): "lots" is not an integer in 1..100000`)
	})
	t.Run("UnknownCommandIsAUsageError", func(t *testing.T) {
		t.Parallel()
		code, _, stderr := runCLI(t, nil, "serve")
		require.Equal(t, 2, code)
		require.Contains(t, stderr, `unknown command "serve"`)
	})
}
