package harness

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Main runs a load test as a command, with the process's arguments and
// environment, until it ends or SIGINT or SIGTERM cancels it; on an error
// it prints it and exits 1.
func Main(tool string, run RunFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Environ())
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", tool, err)
		os.Exit(1)
	}
}
