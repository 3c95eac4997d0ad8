// Command push_handoff is the push hand-off load test: the latency from a
// client's POST of an event to the decrypted push message at each device
// of its space, judged against perf.push_handoff_p95 on the p95 from the
// 201, with what each part of the deployment costs per event and message.
//
//	go run ./perf/push_handoff [--rate 500/s] [--duration 30s] [--devices N] [--fanout F] [--short] [--json]
//	    [--workers 1] [--connections 64] [--events-per-request 1] [--bin PATH] [--pg-setting k=v] [--out perf/out]
//	go run ./perf/push_handoff --in-process [--rate 500/s] [--duration 30s] [--variants 5ms/50ms,1ms/20ms] [--segment 5s]
//	go run ./perf/push_handoff --in-process --mode fanout [--devices 10000] [--events 5]
//
// By default it runs the deployment: the bothy binary as separate api and
// worker processes on a private PostgreSQL cluster, producers POSTing over
// HTTP. --in-process runs the worker in this process instead, for
// profiling, the --variants comparison and the fan-out mode, which writes
// one event at a time to a space where every device's principal is a
// member and reports commit -> last device's decrypted message and
// messages per CPU-second.
//
// It exits 1 when the p95 is over budget, messages were lost, repeated or
// did not decrypt, or the run failed. See package pushhandoff for what it
// does.
package main

import (
	"github.com/bothy/bothy/services/server/loadtest/harness"
	"github.com/bothy/bothy/services/server/loadtest/pushhandoff"
)

func main() {
	// The receiver and the producers run as children of this binary.
	pushhandoff.ServeReceiverIfAsked()
	harness.RunChild(pushhandoff.ChildRoles())
	harness.Main("push_handoff", pushhandoff.Run)
}
