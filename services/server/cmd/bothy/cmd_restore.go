package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

func init() {
	register(command{Name: "restore finalize", Summary: "after a restore: move every consumer cursor to the head (ADR 0059)", Run: runRestoreFinalize})
}

// runRestoreFinalize sets every consumer cursor to the head of the log, so
// a restored database does not deliver again what was delivered before the
// backup's restore point. Run it after the restore, before the workers.
func runRestoreFinalize(ctx context.Context, e *env, args []string) error {
	var asJSON *bool
	_, pool, rest, err := dbCommand(ctx, e, "restore finalize", args, func(fs *flag.FlagSet) {
		asJSON = fs.Bool("json", false, "print the moves as JSON")
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	if len(rest) > 0 {
		return fmt.Errorf("unexpected arguments %q: %w", rest, errUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	moves, err := postgres.RestoreFinalize(ctx, pool)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Cursors []postgres.CursorMove `json:"cursors"`
		}{Cursors: moves})
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tFROM\tTO\tSKIPPED")
	var moved int
	for _, m := range moves {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", m.Consumer, m.From, m.To, m.Skipped)
		if m.From != m.To {
			moved++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if moved == 0 {
		fmt.Fprintln(e.stdout, "every cursor was already at the head; nothing changed")
	} else {
		fmt.Fprintf(e.stdout, "moved %d of %d cursors to the head\n", moved, len(moves))
	}
	return nil
}
