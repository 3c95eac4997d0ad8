// Command soak is the multi-process fault-injection soak: several
// real "bothy server" processes on a private PostgreSQL cluster, producers
// with deliberate rollbacks, and faults at random moments (SIGKILL,
// terminated connections, a crash of the cluster, a revoked right); at the
// end it drains and proves every committed event became exactly one job per
// consumer and target, every acknowledged event survived the crash at its
// seq, and nothing was lost.
//
//	go run ./perf/soak [--duration 2m] [--short] [--rate 40] [--producers 4] [--workers 3]
//	    [--pg-crash auto|on|off] [--pg-port N] [--seed N] [--keep] [--bin path]
//
// With BOTHY_DATABASE_URL set it runs on that server and skips the crash.
//
// It exits 1 on any violation or when the run could not be done. See package
// soak for what it does.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/bothy/bothy/services/server/loadtest/soak"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := soak.Run(ctx, os.Args[1:], os.Stdout, os.Environ())
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}
