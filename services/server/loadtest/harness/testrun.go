package harness

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// RunFunc is a load test's Run.
type RunFunc func(ctx context.Context, args []string, stdout io.Writer, environ []string) error

// RunForTest runs a load test from a Go test, on the database
// BOTHY_TEST_DATABASE_URL names (unless BOTHY_DATABASE_URL is set), within
// 3 minutes, and logs its output. It skips the test under -short. It
// returns the output and what run returned; an error that is timingOnly
// (errors.Is) is logged and returned as nil, since timing figures belong
// to the tool's own run, not to a test sharing the machine.
func RunForTest(t testing.TB, run RunFunc, timingOnly error, args ...string) (string, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("load test: skipped with -short")
	}
	environ := os.Environ()
	if u := os.Getenv("BOTHY_TEST_DATABASE_URL"); u != "" && os.Getenv("BOTHY_DATABASE_URL") == "" {
		environ = append(environ, "BOTHY_DATABASE_URL="+u)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var buf bytes.Buffer
	err := run(ctx, args, &buf, environ)
	t.Logf("%v:\n%s", args, buf.String())
	if timingOnly != nil && errors.Is(err, timingOnly) {
		t.Logf("over a timing budget in this run (not asserted here): %v", err)
		err = nil
	}
	return buf.String(), err
}
