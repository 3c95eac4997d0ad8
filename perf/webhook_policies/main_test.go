package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/loadtest/harness"
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
	_, err := harness.RunForTest(t, webhookpolicies.Run, nil, "--short")
	require.NoError(t, err)
}
