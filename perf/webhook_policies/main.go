// Command webhook_policies is the load test of the webhook delivery
// policies: events per second an unordered subscription delivers to a
// receiver that answers in 200 ms, with every signature verified, and an
// ordered subscription fed the same events checked for strict order.
//
//	go run ./perf/webhook_policies [--rate 250/s] [--duration 30s] [--latency 200ms]
//	    [--max-in-flight 50] [--goal 200] [--batch 10] [--short] [--config FILE] [--keep]
//
// It exits 1 when a check failed or the unordered rate is below --goal.
// See package webhookpolicies for what it does.
package main

import (
	"github.com/bothy/bothy/services/server/loadtest/harness"
	"github.com/bothy/bothy/services/server/loadtest/webhookpolicies"
)

func main() {
	harness.Main("webhook_policies", webhookpolicies.Run)
}
