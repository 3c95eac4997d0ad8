package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

func init() {
	register(command{Name: "restore finalize", Summary: "after a restore: move every consumer cursor to the head (ADR 0059)", Setup: setupRestoreFinalize})
}

// setupRestoreFinalize sets every consumer cursor to the head of the log,
// so a restored database does not deliver again what was delivered before
// the backup's restore point. Run it after the restore, before the workers.
func setupRestoreFinalize(fs *flag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		moves, err := postgres.RestoreFinalize(ctx, pool)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(struct {
				Cursors []postgres.CursorMove `json:"cursors"`
			}{Cursors: moves})
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
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
			fmt.Fprintln(c.stdout, "every cursor was already at the head; nothing changed")
		} else {
			fmt.Fprintf(c.stdout, "moved %d of %d cursors to the head\n", moved, len(moves))
		}
		return nil
	}
}
