// Command webhook_handoff is the webhook load test. By default it measures
// the hand-off: p95 from a producer's commit to the webhook request
// received with a verified signature, judged against
// perf.webhook_handoff_p95. With --backlog N it measures what one worker
// costs per delivery while it drains a backlog.
//
//	go run ./perf/webhook_handoff [--rate 500/s] [--duration 30s] [--subscriptions 100] [--spaces 10]
//	    [--fanout 1] [--unordered 0] [--short] [--out perf/out] [--json] [--statements] [--private]
//	go run ./perf/webhook_handoff --backlog 2000 [--subscriptions 100] [--unordered K] [--max-batch K] [--json]
//	go run ./perf/webhook_handoff ... --destination rabbitmq|jetstream|redis|mqtt [--broker-url URL]
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
	// The receiver and the producer run as children of this binary.
	harness.RunChild(webhookhandoff.ChildRoles())
	harness.Main("webhook_handoff", webhookhandoff.Run)
}
