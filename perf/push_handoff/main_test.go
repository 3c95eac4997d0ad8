package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/loadtest/pushhandoff"
)

// TestMain lets the fan-out mode start this test binary again as its
// receiver process.
func TestMain(m *testing.M) {
	pushhandoff.ServeReceiverIfAsked()
	os.Exit(m.Run())
}

// TestPushHandoffShort runs the load test in its short mode (a few seconds
// at 500 events/s) and requires every message to arrive and decrypt, and
// the summary and histogram to be written. The p95 verdict against
// perf.push_handoff_p95 is logged, not asserted: under "go test ./..." the
// load test shares two cores with every other package's tests, and timing
// figures belong to the tool's own run (go run ./perf/push_handoff), which
// exits non-zero above the budget.
func TestPushHandoffShort(t *testing.T) {
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
	err := pushhandoff.Run(ctx, []string{"--short", "--out", out}, &buf, environ)
	t.Logf("push_handoff --short:\n%s", buf.String())
	if errors.Is(err, pushhandoff.ErrP95OverBudget) {
		t.Logf("p95 over budget in this run (not asserted here): %v", err)
		err = nil
	}
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(out, "push_handoff.txt"))
	require.FileExists(t, filepath.Join(out, "push_handoff.png"))
}

// TestPushHandoffFanoutShort runs the fan-out mode with a few hundred
// devices and requires every device to get and decrypt every event's
// message, and the summary to report messages per CPU-second.
func TestPushHandoffFanoutShort(t *testing.T) {
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
	err := pushhandoff.Run(ctx, []string{"--mode", "fanout", "--short", "--out", out}, &buf, environ)
	t.Logf("push_handoff --mode fanout --short:\n%s", buf.String())
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(out, "push_handoff_fanout.txt"))
	require.Contains(t, buf.String(), "messages per CPU-second")
}
