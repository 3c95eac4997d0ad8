package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func init() {
	modules = append(modules, webhooks.NewModule)
	register(command{Name: "webhooks list", Summary: "webhook subscriptions with status and pending count [--owner --space]", Run: runWebhooksList})
	register(command{Name: "webhooks create", Summary: "subscribe a URL to a space's events --owner --space --url [--events --token]", Run: runWebhooksCreate})
	register(command{Name: "webhooks disable", Summary: "disable a subscription by hand: ID [--reason]", Run: runWebhooksDisable})
	register(command{Name: "webhooks enable", Summary: "re-enable a subscription; it resumes from the current head: ID", Run: runWebhooksEnable})
	register(command{Name: "webhooks rotate-secret", Summary: "new signing secret, old one still signs for --overlap: ID", Run: runWebhooksRotate})
	register(command{Name: "webhooks deliveries", Summary: "a subscription's deliveries and attempts: ID [--status --limit --attempts]", Run: runWebhooksDeliveries})
}

func oneID(name string, rest []string) (uuid.UUID, error) {
	if len(rest) != 1 {
		return uuid.Nil, fmt.Errorf("%w: %s takes one subscription ID", errUsage, name)
	}
	id, err := uuid.Parse(rest[0])
	if err != nil {
		return uuid.Nil, fmt.Errorf("%w: %q is not a subscription ID", errUsage, rest[0])
	}
	return id, nil
}

func runWebhooksList(ctx context.Context, e *env, args []string) error {
	var owner, space string
	_, pool, _, err := dbCommand(ctx, e, "webhooks list", args, func(fs *flag.FlagSet) {
		fs.StringVar(&owner, "owner", "", "only this owner's subscriptions")
		fs.StringVar(&space, "space", "", "only subscriptions on this space")
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	subs, err := webhooks.List(ctx, pool, &webhooks.ListParams{Owner: owner, Space: space})
	if err != nil {
		return err
	}
	if err := postgres.Durable(ctx, pool); err != nil { // pending counts come from rounds
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tOWNER\tSPACE\tSTATUS\tLAST_DELIVERED\tPENDING\tEVENTS\tURL")
	for _, s := range subs {
		status := s.Status
		if s.DisabledCause != "" {
			status += " (" + s.DisabledCause + ")"
		}
		types := strings.Join(s.EventTypes, ",")
		if types == "" {
			types = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.ID, s.Owner, s.Space, status, s.LastDeliveredSeq, s.Pending, types, redactURL(s.URL))
	}
	return tw.Flush()
}

// redactURL hides a URL's query, which often carries a credential.
func redactURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}

func runWebhooksCreate(ctx context.Context, e *env, args []string) error {
	var owner, space, url, events, token string
	cfg, pool, rest, err := dbCommand(ctx, e, "webhooks create", args, func(fs *flag.FlagSet) {
		fs.StringVar(&owner, "owner", "", "principal the deliveries act for (required; needs read on the space)")
		fs.StringVar(&space, "space", "", "space whose events are delivered (required)")
		fs.StringVar(&url, "url", "", "absolute http(s) target URL (required)")
		fs.StringVar(&events, "events", "", "comma-separated event types: item.created, item.* or * (default all)")
		fs.StringVar(&token, "token", "", "token ID whose current scopes bound every delivery (default: the owner's full rights)")
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	if len(rest) > 0 || owner == "" || space == "" || url == "" {
		return fmt.Errorf("%w: webhooks create needs --owner, --space and --url", errUsage)
	}
	p := &webhooks.CreateParams{Owner: owner, Space: space, URL: url, AllowPrivateTargets: cfg.Webhooks.AllowPrivateTargets}
	if events != "" {
		for _, t := range strings.Split(events, ",") {
			p.EventTypes = append(p.EventTypes, strings.TrimSpace(t))
		}
	}
	if token != "" {
		id, err := uuid.Parse(token)
		if err != nil {
			return fmt.Errorf("%w: --token %q is not a token ID", errUsage, token)
		}
		p.TokenID = &id
	}
	s, secret, err := webhooks.Create(ctx, pool, p)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "subscription %s created on space %s, starting after seq %d\n", s.ID, s.Space, s.ResumeAfterSeq)
	fmt.Fprintf(e.stdout, "signing secret (shown once; give it to the receiver): %s\n", secret)
	return nil
}

func runWebhooksDisable(ctx context.Context, e *env, args []string) error {
	var reason string
	_, pool, rest, err := dbCommand(ctx, e, "webhooks disable", args, func(fs *flag.FlagSet) {
		fs.StringVar(&reason, "reason", "disabled by hand", "note stored with the subscription")
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	id, err := oneID("webhooks disable", rest)
	if err != nil {
		return err
	}
	if err := webhooks.Disable(ctx, pool, id, reason); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "subscription %s disabled (manual)\n", id)
	return nil
}

func runWebhooksEnable(ctx context.Context, e *env, args []string) error {
	_, pool, rest, err := dbCommand(ctx, e, "webhooks enable", args, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	id, err := oneID("webhooks enable", rest)
	if err != nil {
		return err
	}
	res, err := webhooks.Enable(ctx, pool, id)
	if err != nil {
		return err
	}
	if res.ResumeAfterSeq == 0 && res.WasCause == "" {
		fmt.Fprintf(e.stdout, "subscription %s was already active\n", id)
		return nil
	}
	fmt.Fprintf(e.stdout, "subscription %s enabled (was disabled: %s); it resumes from the current head: events after seq %d are delivered\n",
		id, res.WasCause, res.ResumeAfterSeq)
	if res.NotDeliveredTo > 0 {
		fmt.Fprintf(e.stdout, "events of its space in seq %d..%d were NOT delivered and never will be (%d pending deliveries skipped); resynchronize the receiver from the source\n",
			res.NotDeliveredFrom, res.NotDeliveredTo, res.Skipped)
	}
	return nil
}

func runWebhooksRotate(ctx context.Context, e *env, args []string) error {
	var overlap time.Duration
	_, pool, rest, err := dbCommand(ctx, e, "webhooks rotate-secret", args, func(fs *flag.FlagSet) {
		fs.DurationVar(&overlap, "overlap", 24*time.Hour, "how long the old secret still signs as well (0: stop at once)")
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	id, err := oneID("webhooks rotate-secret", rest)
	if err != nil {
		return err
	}
	secret, err := webhooks.RotateSecret(ctx, pool, id, overlap)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "new signing secret for %s (shown once): %s\n", id, secret)
	if overlap > 0 {
		fmt.Fprintf(e.stdout, "requests carry signatures with the old and the new secret for %s\n", overlap)
	}
	return nil
}

func runWebhooksDeliveries(ctx context.Context, e *env, args []string) error {
	var status string
	var limit int
	var attempts bool
	_, pool, rest, err := dbCommand(ctx, e, "webhooks deliveries", args, func(fs *flag.FlagSet) {
		fs.StringVar(&status, "status", "", "pending, delivered, dead or skipped (default all)")
		fs.IntVar(&limit, "limit", 50, "newest first, at most this many")
		fs.BoolVar(&attempts, "attempts", false, "also list every attempt of each delivery")
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	id, err := oneID("webhooks deliveries", rest)
	if err != nil {
		return err
	}
	ds, err := webhooks.Deliveries(ctx, pool, &webhooks.DeliveriesParams{SubscriptionID: id, Status: status, Limit: limit})
	if err != nil {
		return err
	}
	if err := postgres.Durable(ctx, pool); err != nil { // deliveries are made by rounds
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tWEBHOOK-ID\tSTATUS\tATTEMPTS\tCREATED\tNEXT_ATTEMPT\tLAST_ERROR")
	for _, d := range ds {
		next := ""
		if d.NextAttemptAt != nil && d.Status == webhooks.DeliveryPending {
			next = d.NextAttemptAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", d.Seq, d.EventID, d.Status, d.Attempts, d.CreatedAt.UTC().Format(time.RFC3339), next, d.LastError)
		if attempts {
			as, err := webhooks.Attempts(ctx, pool, id, d.Seq)
			if err != nil {
				return err
			}
			for _, a := range as {
				code := "-"
				if a.StatusCode != nil {
					code = fmt.Sprint(*a.StatusCode)
				}
				fmt.Fprintf(tw, "\t  attempt\t%s\t%s\t%s\t\t%s\n", code, a.Duration.Round(time.Microsecond), a.At.UTC().Format(time.RFC3339Nano), a.Error)
			}
		}
	}
	return tw.Flush()
}
