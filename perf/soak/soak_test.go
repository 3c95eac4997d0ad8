package main

import (
	"bytes"
	"context"
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
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var buf bytes.Buffer
	err := soak.Run(ctx, []string{"--short"}, &buf, environ)
	t.Logf("soak output:\n%s", buf.String())
	require.NoError(t, err)
}
