package pushhandoff

import (
	"fmt"
	"time"

	shared "github.com/bothy/bothy/services/server/loadtest/harness"
)

// writeHistogram draws one latency histogram per variant, stacked, with
// the p50, p95, p99 and the budget marked, and writes it as a PNG.
func writeHistogram(path string, results []*result, budget time.Duration) error {
	panels := make([]shared.Panel, len(results))
	for i, r := range results {
		panels[i] = shared.Panel{
			Title: fmt.Sprintf("fetch_cooldown/poll %s: %d msgs, %.0f msgs/s, lost %d", r.Variant, len(r.Latencies), r.Throughput, r.Lost),
			Axis:  "ms from producer commit to decrypted message", Latencies: r.Latencies,
			P50: r.P50, P95: r.P95, P99: r.P99, Max: r.Max,
		}
	}
	return shared.WriteHistogram(path, panels, budget)
}
