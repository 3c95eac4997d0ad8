package main

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/loadtest/webhookpolicies"
)

// TestWebhookPoliciesShort runs the load test briefly (3 s at 100 events/s)
// for correctness only: every signature verifies, the unordered
// subscription delivers every event once within its max_in_flight, and the
// ordered one receives its events strictly in seq order. The throughput
// goal is not judged here: under "go test ./..." the run shares the machine
// with every other package's tests, and figures belong to the tool's own
// run (go run ./perf/webhook_policies).
func TestWebhookPoliciesShort(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: skipped with -short")
	}
	environ := os.Environ()
	if u := os.Getenv("BOTHY_TEST_DATABASE_URL"); u != "" && os.Getenv("BOTHY_DATABASE_URL") == "" {
		environ = append(environ, "BOTHY_DATABASE_URL="+u)
	}
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := webhookpolicies.Run(ctx, []string{"--short"}, &buf, environ)
	t.Logf("webhook_policies --short:\n%s", buf.String())
	require.NoError(t, err)
}
