// Command trace_handoff measures what tracing costs the hand-off: commit ->
// webhook request and commit -> decrypted push message, p50/p95/p99, with
// tracing off and on in alternating slices. See package tracehandoff.
//
//	go run ./perf/trace_handoff [--rate 200/s] [--slice 10s] [--slices 6] [--spaces 10] [--producers 16]
package main

import (
	"github.com/bothy/bothy/services/server/loadtest/harness"
	"github.com/bothy/bothy/services/server/loadtest/tracehandoff"
)

func main() {
	harness.Main("trace_handoff", tracehandoff.Run)
}
