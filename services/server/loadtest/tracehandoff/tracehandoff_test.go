package tracehandoff_test

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/loadtest/tracehandoff"
)

// TestTraceHandoffShort runs the measurement briefly, one slice off and one
// on, and requires every webhook and push message to arrive in both and the
// traced slice to have exported spans. Timing figures belong to the tool's
// own run (go run ./perf/trace_handoff), not to a test sharing the machine.
func TestTraceHandoffShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker twice on a scratch database")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := tracehandoff.Run(ctx, []string{"--rate", "20/s", "--slice", "1s", "--slices", "2", "--spaces", "2", "--producers", "2"}, &out, os.Environ())
	require.NoError(t, err, "%s", out.String())
	require.Regexp(t, regexp.MustCompile(`(?m)^off\s+20 .* 0, 0$`), out.String())
	require.Regexp(t, regexp.MustCompile(`(?m)^on\s+20 .* 0, 0$`), out.String())
	require.NotRegexp(t, regexp.MustCompile(`(?m)OTLP bytes received \(on\): 0$`), out.String())
}
