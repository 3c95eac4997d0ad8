package main

import (
	"context"
	"fmt"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

func init() {
	register(command{Name: "consumers status", Summary: "per consumer: last_seq, head, lag, pending age, last successful round, seqs lost to retention",
		Remote: true, Setup: setupConsumersStatus})
}

func setupConsumersStatus(fs *pflag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		sts, err := consumerStatuses(ctx, c)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(sts)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CONSUMER\tLAST_SEQ\tHEAD\tLAG\tPENDING_AGE\tLAST_ROUND\tLOST")
		for _, s := range sts {
			last := "never"
			if s.LastRoundAt != nil {
				last = fmt.Sprintf("%s (%s ago)", s.LastRoundAt.UTC().Format(time.RFC3339), time.Since(*s.LastRoundAt).Round(time.Second))
			}
			lost := "-"
			if s.Lost != nil {
				lost = fmt.Sprintf("%d..%d", s.Lost.From, s.Lost.To)
			}
			age := time.Duration(s.PendingAgeSeconds * float64(time.Second)).Round(time.Millisecond)
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\n", s.Name, s.LastSeq, s.Head, s.Lag, age, last, lost)
		}
		return tw.Flush()
	}
}

// consumerStatuses reads every consumer's status from the server (GET
// /v1/consumers, which needs ops:read) or the database.
func consumerStatuses(ctx context.Context, c *call) ([]sync.ConsumerStatusJSON, error) {
	api, err := c.remote.client()
	if err != nil {
		return nil, err
	}
	if api != nil {
		var res sync.ConsumerStatusList
		err := api.do(ctx, http.MethodGet, "/v1/consumers", nil, nil, &res)
		return res.Consumers, err
	}
	_, pool, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	sts, err := postgres.ConsumerStatuses(ctx, pool)
	if err != nil {
		return nil, err
	}
	if err := postgres.Durable(ctx, pool); err != nil {
		return nil, err
	}
	out := make([]sync.ConsumerStatusJSON, len(sts))
	for i, s := range sts {
		out[i] = s.JSON()
	}
	return out, nil
}
