package main

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/loadtest/soak"
)

// TestSoakShort runs the soak in its short mode (about a minute: three
// worker processes and one api process, faults early, no PostgreSQL
// restart) and requires zero violations.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process soak: skipped with -short")
	}
	environ := os.Environ()
	if u := os.Getenv("BOTHY_TEST_DATABASE_URL"); u != "" && os.Getenv("BOTHY_DATABASE_URL") == "" {
		environ = append(environ, "BOTHY_DATABASE_URL="+u)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var buf bytes.Buffer
	err := soak.Run(ctx, []string{"--short"}, &buf, environ)
	t.Logf("soak output:\n%s", buf.String())
	require.NoError(t, err)
}
