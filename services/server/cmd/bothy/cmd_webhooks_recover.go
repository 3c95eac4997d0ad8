package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func init() {
	register(command{Name: "webhooks resend", Args: "SUBSCRIPTION_ID SEQ", Setup: setupWebhooksResend,
		Summary: "send one delivered, dead or skipped delivery again, with the same webhook-id"})
	register(command{Name: "webhooks recover", Args: "SUBSCRIPTION_ID", Setup: setupWebhooksRecover,
		Summary: "send a seq or time range's dead, skipped and not delivered events, while the log holds them"})
}

// sendDeps are what resend, recover and enable --from backlog need beside
// the pool: the log to read events from and a River client that only
// inserts the delivery job (the server's workers send).
type sendDeps struct {
	events *postgres.EventLog
	jobs   *river.Client[pgx.Tx]
}

func newSendDeps(pool *pgxpool.Pool) (*sendDeps, error) {
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return &sendDeps{events: postgres.NewEventLog(pool, nil), jobs: rc}, nil
}

func setupWebhooksResend(fs *flag.FlagSet) func(context.Context, *call) error {
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
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		deps, err := newSendDeps(pool)
		if err != nil {
			return err
		}
		defer deps.events.Close()
		d, err := webhooks.Resend(ctx, pool, &webhooks.ResendParams{SubscriptionID: id, Seq: seq, Events: deps.events, Jobs: deps.jobs})
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(webhooks.NewDeliveryView(d, nil, false))
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

func setupWebhooksRecover(fs *flag.FlagSet) func(context.Context, *call) error {
	fromSeq := fs.Int64("from-seq", 0, "first seq of the range")
	toSeq := fs.Int64("to-seq", 0, "last seq of the range, included (default: the head)")
	since := fs.String("since", "", "RFC 3339 time: events committed at or after it, instead of --from-seq")
	until := fs.String("until", "", "RFC 3339 time: events committed before it (default: up to the head)")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		p, err := recoverRange(id, *fromSeq, *toSeq, *since, *until)
		if err != nil {
			return err
		}
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		deps, err := newSendDeps(pool)
		if err != nil {
			return err
		}
		defer deps.events.Close()
		p.Events, p.Jobs = deps.events, deps.jobs
		res, err := webhooks.Recover(ctx, pool, p)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(newRecoverJSON(id, res))
		}
		printRecovered(c, id, res)
		return nil
	}
}

// recoverRange returns the parameters of recovering subscription id from
// the range flags: a seq range or a time range, not both.
func recoverRange(id uuid.UUID, fromSeq, toSeq int64, since, until string) (*webhooks.RecoverParams, error) {
	p := &webhooks.RecoverParams{SubscriptionID: id, FromSeq: fromSeq, ToSeq: toSeq}
	for _, f := range []struct {
		name, v string
		to      *time.Time
	}{{"--since", since, &p.Since}, {"--until", until, &p.Until}} {
		if f.v == "" {
			continue
		}
		var err error
		if *f.to, err = time.Parse(time.RFC3339Nano, f.v); err != nil {
			return nil, fmt.Errorf("%w: %s %q: want an RFC 3339 time such as 2026-12-01T08:00:00Z", errUsage, f.name, f.v)
		}
	}
	if bySeq, byTime := fromSeq != 0 || toSeq != 0, since != "" || until != ""; bySeq == byTime {
		return nil, fmt.Errorf("%w: webhooks recover needs --from-seq (and --to-seq) or --since (and --until)", errUsage)
	}
	return p, nil
}

// newRecoverJSON is the --json form of a recovery of subscription id.
func newRecoverJSON(id uuid.UUID, res *webhooks.RecoverResult) recoverJSON {
	return recoverJSON{ID: id.String(), RecoverView: res.View()}
}

// printRecovered tells what a recovery of subscription id lost, if
// anything, and what it made pending again.
func printRecovered(c *call, id uuid.UUID, res *webhooks.RecoverResult) {
	switch {
	case res.Lost.Len() > 0:
		fmt.Fprintf(c.stdout, "events %s left the log (retention) and cannot be recovered; resynchronize the receiver from the source\n", res.Lost)
	case !res.LostSince.IsZero():
		fmt.Fprintf(c.stdout, "events committed from %s to %s left the log (retention) and cannot be recovered; resynchronize the receiver from the source\n",
			res.LostSince.UTC().Format(time.RFC3339Nano), res.LostUntil.UTC().Format(time.RFC3339Nano))
	}
	if res.Range.Len() == 0 {
		fmt.Fprintf(c.stdout, "nothing of the range is in the log; nothing recovered\n")
		return
	}
	fmt.Fprintf(c.stdout, "seqs %s of %s: %d dead or skipped deliveries pending again, %d deliveries made for events that had none; they are sent in seq order before newer pending ones\n",
		res.Range, id, res.Reset, res.Created)
}

// enableFrom enables subscription id from the head or from its backlog.
func enableFrom(ctx context.Context, pool *pgxpool.Pool, id uuid.UUID, from string) (*webhooks.EnableResult, error) {
	if from == "head" {
		return webhooks.Enable(ctx, pool, postgres.CursorStore{}, id)
	}
	deps, err := newSendDeps(pool)
	if err != nil {
		return nil, err
	}
	defer deps.events.Close()
	return webhooks.EnableFromBacklog(ctx, pool, postgres.CursorStore{}, &webhooks.EnableBacklogParams{ID: id, Events: deps.events, Jobs: deps.jobs})
}

func printEnabledFromBacklog(c *call, id uuid.UUID, res *webhooks.EnableResult) {
	fmt.Fprintf(c.stdout, "subscription %s enabled (was disabled: %s) with its backlog: its pending deliveries and %d made for events committed while disabled are sent in seq order, then events after seq %d\n",
		id, res.WasCause, res.Created, res.ResumeAfterSeq)
	if res.NotDeliveredTo > 0 {
		fmt.Fprintf(c.stdout, "events of its space in seq %d..%d left the log (retention) and were NOT delivered (%d pending deliveries skipped); resynchronize the receiver from the source\n",
			res.NotDeliveredFrom, res.NotDeliveredTo, res.Skipped)
	}
}
