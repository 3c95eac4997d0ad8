package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/loadtest/soak"
)

// TestSoakShort runs the soak in its short mode (about a minute: three
// worker processes and one api process, faults early, one crash of its
// private PostgreSQL cluster) and requires zero violations, among them no
// acknowledged event missing after the crash. It never uses
// BOTHY_DATABASE_URL: on a server the soak does not own it would skip the
// crash.
//
// A run whose own harness failed (a fault it could not inject or a query of
// its own that timed out, which hid a check; or the run's time ran out),
// as on a heavily loaded machine, is no verdict on bothy: it is run again,
// up to soakAttempts runs, and reported as a harness failure if none gives
// a verdict. A violation fails the test at once.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process soak: skipped with -short")
	}
	tooltest.Need(t, tooltest.PostgresServer)
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BOTHY_DATABASE_URL=") {
			environ = append(environ, kv)
		}
	}
	var harness []string
	for attempt := 1; attempt <= soakAttempts; attempt++ {
		err := runShort(t, attempt, environ)
		if err == nil {
			return
		}
		require.False(t, errors.Is(err, soak.ErrViolations), "run %d: %v", attempt, err)
		if !errors.Is(err, soak.ErrChecksHidden) && !errors.Is(err, context.DeadlineExceeded) {
			require.NoError(t, err, "run %d", attempt)
		}
		harness = append(harness, fmt.Sprintf("run %d: %v", attempt, err))
		t.Logf("run %d failed in the harness, not in bothy: %v", attempt, err)
	}
	t.Fatalf("no run of %d gave a verdict; the harness failed each time (no product violation):\n%s",
		soakAttempts, strings.Join(harness, "\n"))
}

// soakAttempts bounds the runs of TestSoakShort.
const soakAttempts = 3

// runShort runs the short soak once, within 4 minutes, and logs its output.
func runShort(t *testing.T, attempt int, environ []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var buf bytes.Buffer
	err := soak.Run(ctx, []string{"--short"}, &buf, environ)
	t.Logf("soak output (run %d):\n%s", attempt, buf.String())
	return err
}
