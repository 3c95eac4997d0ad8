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

// TestPushHandoffShort runs the load test in its short mode (a few seconds
// at 500 events/s) and requires it to pass: every message arrives and
// decrypts, and the p95 from commit to decrypted message is within
// perf.push_handoff_p95. The machine is shared, so a p95 miss alone is
// measured once more before the test fails; lost or undecryptable messages
// fail at once.
func TestPushHandoffShort(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: skipped with -short")
	}
	environ := os.Environ()
	if u := os.Getenv("BOTHY_TEST_DATABASE_URL"); u != "" && os.Getenv("BOTHY_DATABASE_URL") == "" {
		environ = append(environ, "BOTHY_DATABASE_URL="+u)
	}
	var err error
	for attempt := 1; attempt <= 2; attempt++ {
		out := t.TempDir()
		var buf bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		err = pushhandoff.Run(ctx, []string{"--short", "--out", out}, &buf, environ)
		cancel()
		t.Logf("attempt %d:\n%s", attempt, buf.String())
		if err == nil {
			require.FileExists(t, filepath.Join(out, "push_handoff.txt"))
			require.FileExists(t, filepath.Join(out, "push_handoff.png"))
			return
		}
		if !errors.Is(err, pushhandoff.ErrP95OverBudget) {
			break
		}
	}
	require.NoError(t, err)
}
