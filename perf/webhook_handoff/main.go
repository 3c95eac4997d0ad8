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
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/bothy/bothy/services/server/loadtest/webhookhandoff"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := webhookhandoff.Run(ctx, os.Args[1:], os.Stdout, os.Environ())
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhook_handoff:", err)
		os.Exit(1)
	}
}
