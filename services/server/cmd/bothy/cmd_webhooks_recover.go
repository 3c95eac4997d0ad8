package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func init() {
	register(command{Name: "webhooks resend", Args: "SUBSCRIPTION_ID SEQ", Remote: true, Setup: setupWebhooksResend,
		Summary: "send one delivered, dead or skipped delivery again, with the same webhook-id"})
	register(command{Name: "webhooks recover", Args: "SUBSCRIPTION_ID", Remote: true, Setup: setupWebhooksRecover,
		Summary: "send a seq or time range's dead, skipped and not delivered events (default: since the subscription's creation), while the log holds them"})
}

func setupWebhooksResend(fs *pflag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		seq, err := strconv.ParseInt(c.args[1], 10, 64)
		if err != nil || seq < 1 {
			return fmt.Errorf("%w: %q is not a seq", errUsage, c.args[1])
		}
		svc, done, err := c.webhooks(ctx)
		if err != nil {
			return err
		}
		defer done()
		d, err := svc.Resend(ctx, id, seq)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(d)
		}
		fmt.Fprintf(c.stdout, "delivery %d of %s is pending again (webhook-id %s); the subscription's sender sends it before newer pending ones\n",
			d.Seq, id, d.EventID)
		return nil
	}
}

// recoverJSON is what "bothy webhooks recover --json" prints: the HTTP
// API's answer with the subscription's id first.
type recoverJSON struct {
	ID string `json:"id"`
	webhooks.RecoverView
}

func setupWebhooksRecover(fs *pflag.FlagSet) func(context.Context, *call) error {
	fromSeq := fs.Int64("from-seq", 0, "first seq of the range (default: the first committed at or after the subscription's creation)")
	toSeq := fs.Int64("to-seq", 0, "last seq of the range, included (default: the head)")
	since := fs.String("since", "", "events committed at or after this time (RFC 3339, or a duration before now such as 10m), instead of --from-seq")
	until := fs.String("until", "", "events committed before this time (RFC 3339, or a duration before now; default: up to the head)")
	beforeCreation := fs.Bool("before-creation", false, "allow a range that starts before the subscription was created")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		req, err := recoverRange(*fromSeq, *toSeq, *since, *until, time.Now())
		if err != nil {
			return err
		}
		if *beforeCreation {
			req.BeforeCreation = beforeCreation
		}
		svc, done, err := c.webhooks(ctx)
		if err != nil {
			return err
		}
		defer done()
		res, err := svc.Recover(ctx, id, req)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(recoverJSON{ID: id.String(), RecoverView: res})
		}
		printRecovered(c, id, &res)
		return nil
	}
}

// recoverRange returns the request the range flags make: a seq range or a
// time range (a duration counts back from now), not both; neither starts
// at the subscription's creation.
func recoverRange(fromSeq, toSeq int64, since, until string, now time.Time) (*webhooks.RecoverRequest, error) {
	req := &webhooks.RecoverRequest{}
	if fromSeq != 0 {
		req.FromSeq = &fromSeq
	}
	if toSeq != 0 {
		req.ToSeq = &toSeq
	}
	for _, f := range []struct {
		name, v string
		to      **time.Time
	}{{"--since", since, &req.Since}, {"--until", until, &req.Until}} {
		if f.v == "" {
			continue
		}
		t, err := parseTime(f.name, f.v, now)
		if err != nil {
			return nil, err
		}
		*f.to = &t
	}
	if bySeq, byTime := fromSeq != 0 || toSeq != 0, since != "" || until != ""; bySeq && byTime {
		return nil, fmt.Errorf("%w: webhooks recover takes --from-seq (and --to-seq) or --since (and --until), not both", errUsage)
	}
	return req, nil
}

// printRecovered tells what a recovery of subscription id lost, if
// anything, and what it made pending again.
func printRecovered(c *call, id uuid.UUID, res *webhooks.RecoverView) {
	switch lost := res.Lost; {
	case lost == nil:
	case lost.Since != nil:
		fmt.Fprintf(c.stdout, "events committed from %s to %s left the log (retention) and cannot be recovered; resynchronize the receiver from the source\n",
			lost.Since.UTC().Format(time.RFC3339Nano), lost.Until.UTC().Format(time.RFC3339Nano))
	default:
		fmt.Fprintf(c.stdout, "events %d..%d left the log (retention) and cannot be recovered; resynchronize the receiver from the source\n", lost.From, lost.To)
	}
	if res.Range == nil {
		fmt.Fprintf(c.stdout, "nothing of the range is in the log; nothing recovered\n")
		return
	}
	fmt.Fprintf(c.stdout, "seqs %d..%d of %s: %d dead or skipped deliveries pending again, %d deliveries made for events that had none; they are sent in seq order before newer pending ones\n",
		res.Range.From, res.Range.To, id, res.Reset, res.Created)
}
