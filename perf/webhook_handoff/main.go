// Command webhook_handoff is the webhook hand-off load test: p95 from a
// producer's commit to the webhook request received with a verified
// signature, judged against perf.webhook_handoff_p95.
//
//	go run ./perf/webhook_handoff [--rate 500/s] [--duration 30s] [--subscriptions 100] [--spaces 10]
//	    [--fanout 1] [--unordered 0] [--short] [--out perf/out]
//
// It exits 1 when the p95 is over budget, a delivery was missing, repeated,
// out of order on an ordered subscription or badly signed, or the run
// failed. See package webhookhandoff for what it does.
package main

import (
	"github.com/bothy/bothy/services/server/loadtest/harness"
	"github.com/bothy/bothy/services/server/loadtest/webhookhandoff"
)

func main() {
	harness.Main("webhook_handoff", webhookhandoff.Run)
}
