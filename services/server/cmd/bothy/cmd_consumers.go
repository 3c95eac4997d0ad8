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
			out := make([]consumerStatusJSON, len(sts))
			for i, s := range sts {
				out[i].ConsumerStatus = s
				if s.Lost.Len() > 0 {
					out[i].Lost = &seqRangeJSON{From: s.Lost.From, To: s.Lost.To}
				}
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

// consumerStatusJSON is a consumer in "bothy consumers status --json", with
// the field names of GET /v1/consumers; Lost is null when retention removed
// nothing ahead of the cursor.
type consumerStatusJSON struct {
	postgres.ConsumerStatus
	Lost *seqRangeJSON `json:"lost"`
}

// seqRangeJSON is an inclusive range of seqs.
type seqRangeJSON struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}
