package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

func init() {
	register(command{Name: "consumers status", Summary: "per consumer: last_seq, head, lag, pending age, last successful round, seqs lost to retention", Setup: setupConsumersStatus})
}

func setupConsumersStatus(fs *flag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		sts, err := postgres.ConsumerStatuses(ctx, pool)
		if err != nil {
			return err
		}
		if err := postgres.Durable(ctx, pool); err != nil {
			return err
		}
		if *asJSON {
			out := make([]sync.ConsumerStatusJSON, len(sts))
			for i, s := range sts {
				out[i] = s.JSON()
			}
			return c.printJSON(out)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CONSUMER\tLAST_SEQ\tHEAD\tLAG\tPENDING_AGE\tLAST_ROUND\tLOST")
		for _, s := range sts {
			last := "never"
			if s.LastRoundAt != nil {
				last = fmt.Sprintf("%s (%s ago)", s.LastRoundAt.UTC().Format(time.RFC3339), time.Since(*s.LastRoundAt).Round(time.Second))
			}
			lost := "-"
			if s.Lost.Len() > 0 {
				lost = s.Lost.String()
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\n", s.Name, s.LastSeq, s.Head, s.Lag, s.PendingAge.Round(time.Millisecond), last, lost)
		}
		return tw.Flush()
	}
}
