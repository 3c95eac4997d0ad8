package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func setupWebhooksPreview(fs *pflag.FlagSet) func(context.Context, *call) error {
	filter := fs.String("filter", "", "CEL filter to try (default: the saved one; \"\" for none)")
	transform := fs.String("transform", "", "CEL transform to try (default: the saved one; \"\" for none)")
	event := fs.String("event", "", "a JSON event to evaluate instead of the space's recent events: {\"type\": ..., \"data\": {...}} (other envelope fields optional)")
	limit := fs.Int("limit", 20, fmt.Sprintf("how many of the space's newest events to evaluate (1..%d)", webhooks.MaxPreviewEvents))
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		if *limit < 1 || *limit > webhooks.MaxPreviewEvents {
			return fmt.Errorf("%w: --limit %d: want 1..%d", errUsage, *limit, webhooks.MaxPreviewEvents)
		}
		req := &webhooks.PreviewRequest{Limit: *limit}
		if c.fs.Changed("filter") {
			req.Filter = filter
		}
		if c.fs.Changed("transform") {
			req.Transform = transform
		}
		if *event != "" {
			req.Event = &webhooks.PreviewEvent{}
			if err := json.Unmarshal([]byte(*event), req.Event); err != nil || req.Event.Type == "" {
				return fmt.Errorf("%w: --event: want a JSON object with at least \"type\"", errUsage)
			}
		}
		svc, done, err := c.webhooks(ctx)
		if err != nil {
			return err
		}
		defer done()
		v, err := svc.Preview(ctx, id, req)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(v)
		}
		return printPreview(c, v)
	}
}

// printPreview prints one line per event: whether it would be delivered
// and the body it would be sent, or why an expression failed on it.
func printPreview(c *call, v *webhooks.PreviewView) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTYPE\tMATCHED\tBODY")
	for _, r := range v.Results {
		out := string(r.Body)
		if r.Error != "" {
			out = "error: " + r.Error
		} else if !r.Matched {
			out = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%t\t%s\n", r.Seq, r.Type, r.Matched, out)
	}
	if len(v.Results) == 0 {
		fmt.Fprintln(tw, "(no recent events on the space: give one with --event)")
	}
	return tw.Flush()
}
