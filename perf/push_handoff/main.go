// Command push_handoff is the push hand-off load test:
// p95 from a producer's commit to the decrypted push message, judged against
// perf.push_handoff_p95.
//
//	go run ./perf/push_handoff [--rate 500/s] [--duration 30s] [--devices N] [--short]
//	    [--variants 5ms/50ms,1ms/20ms] [--segment 5s] [--out perf/out]
//	go run ./perf/push_handoff --mode fanout [--devices 10000] [--events 5]
//
// The fan-out mode writes one event at a time to a space where every
// device's principal is a member, and reports commit -> last device's
// decrypted message and messages per CPU-second.
//
// It exits 1 when the p95 is over budget, messages were lost or did not
// decrypt, or the run failed. See package pushhandoff for what it does.
package main

import (
	"github.com/bothy/bothy/services/server/loadtest/harness"
	"github.com/bothy/bothy/services/server/loadtest/pushhandoff"
)

func main() {
	pushhandoff.ServeReceiverIfAsked()
	harness.Main("push_handoff", pushhandoff.Run)
}
