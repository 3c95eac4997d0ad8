package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/loadtest/webhookhandoff"
)

// TestWebhookHandoffShort runs the load test in its short mode (3 s at 100
// events/s over 8 subscriptions, 2 of them unordered) and requires every
// delivery to arrive once with a verified signature, the ordered
// subscriptions to receive theirs in seq order, and the summary and
// histogram to be written. The p95 verdict against
// perf.webhook_handoff_p95 is logged, not asserted: under "go test ./..."
// the load test shares two cores with every other package's tests, and
// timing figures belong to the tool's own run (go run
// ./perf/webhook_handoff), which exits non-zero above the budget.
func TestWebhookHandoffShort(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: skipped with -short")
	}
	environ := os.Environ()
	if u := os.Getenv("BOTHY_TEST_DATABASE_URL"); u != "" && os.Getenv("BOTHY_DATABASE_URL") == "" {
		environ = append(environ, "BOTHY_DATABASE_URL="+u)
	}
	out := t.TempDir()
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := webhookhandoff.Run(ctx, []string{"--short", "--out", out}, &buf, environ)
	t.Logf("webhook_handoff --short:\n%s", buf.String())
	if errors.Is(err, webhookhandoff.ErrP95OverBudget) {
		t.Logf("p95 over budget in this run (not asserted here): %v", err)
		err = nil
	}
	require.NoError(t, err)
	// events, deliveries, 4 quantiles, then missing, duplicates,
	// out-of-order and bad signatures, all zero.
	require.Regexp(t, regexp.MustCompile(`(?m)^\s+300\s+300\s+(\S+\s+){4}0\s+0\s+0\s+0$`), buf.String())
	require.FileExists(t, filepath.Join(out, "webhook_handoff.txt"))
	require.FileExists(t, filepath.Join(out, "webhook_handoff.png"))
}
