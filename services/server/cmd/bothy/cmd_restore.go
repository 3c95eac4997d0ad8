package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

func init() {
	register(command{Name: "restore finalize", Summary: "after a restore: move every consumer cursor to the head (ADR 0059); --yes to act", Setup: setupRestoreFinalize})
}

// errWorkersRunning is returned by restore finalize --yes while worker
// processes hold liveness locks and --force is not given.
var errWorkersRunning = errors.New("worker processes are running on this database")

// restoreReport is the --json output of restore finalize.
type restoreReport struct {
	// DryRun: nothing changed; Cursors is what --yes would do.
	DryRun  bool                  `json:"dry_run"`
	Cursors []postgres.CursorMove `json:"cursors"`
	// Workers are the sessions that held a liveness lock when it ran.
	Workers []liveness.Session `json:"workers"`
}

// setupRestoreFinalize sets every consumer cursor to the head of the log,
// so a restored database does not deliver again what was delivered before
// the backup's restore point. Run it after the restore, before the workers.
// Without --yes it only prints what it would do; with --yes it refuses
// while a worker process holds a liveness lock, unless --force.
func setupRestoreFinalize(fs *pflag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	yes := fs.Bool("yes", false, "move the cursors (without it, only print what would move)")
	force := fs.Bool("force", false, "move the cursors even while worker processes hold liveness locks")
	return func(ctx context.Context, c *call) error {
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		workers, err := liveness.Holders(ctx, pool)
		if err != nil {
			return err
		}
		if !*yes {
			plan, err := postgres.PlanRestoreFinalize(ctx, pool)
			if err != nil {
				return err
			}
			// The head may come from a producer's commit that is not on disk yet.
			if err := postgres.Durable(ctx, pool); err != nil {
				return err
			}
			return c.printRestore(&restoreReport{DryRun: true, Cursors: plan, Workers: workers}, *asJSON)
		}
		if len(workers) > 0 && !*force {
			return fmt.Errorf("%w: %s hold liveness locks; stop every worker (bothy server --role=worker or all) and retry, "+
				"or pass --force", errWorkersRunning, sessionList(workers))
		}
		moves, err := postgres.RestoreFinalize(ctx, pool)
		if err != nil {
			return err
		}
		return c.printRestore(&restoreReport{Cursors: moves, Workers: workers}, *asJSON)
	}
}

func sessionList(ss []liveness.Session) string {
	out := make([]string, len(ss))
	for i := range ss {
		out[i] = ss[i].String()
	}
	return strings.Join(out, "; ")
}

// printRestore prints a plan or what moved, as a table or as JSON.
func (c *call) printRestore(r *restoreReport, asJSON bool) error {
	if asJSON {
		if r.Workers == nil {
			r.Workers = []liveness.Session{}
		}
		return c.printJSON(r)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tFROM\tTO\tSKIPPED")
	var moved int
	for _, m := range r.Cursors {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", m.Consumer, m.From, m.To, m.Skipped)
		if m.From != m.To {
			moved++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printRestoreSummary(c.stdout, r, moved)
	return nil
}

func printRestoreSummary(w io.Writer, r *restoreReport, moved int) {
	switch {
	case r.DryRun && moved == 0:
		fmt.Fprintln(w, "dry run: every cursor is at the head; nothing would change")
	case r.DryRun:
		fmt.Fprintf(w, "dry run: nothing changed; --yes moves %d of %d cursors to the head (the head may have moved on by then)\n",
			moved, len(r.Cursors))
	case moved == 0:
		fmt.Fprintln(w, "every cursor was already at the head; nothing changed")
	default:
		fmt.Fprintf(w, "moved %d of %d cursors to the head\n", moved, len(r.Cursors))
	}
	if len(r.Workers) > 0 {
		verb := "--yes refuses while they run (--force overrides)"
		if !r.DryRun {
			verb = "moved anyway (--force)"
		}
		fmt.Fprintf(w, "worker processes hold liveness locks: %s; %s\n", sessionList(r.Workers), verb)
	}
}
