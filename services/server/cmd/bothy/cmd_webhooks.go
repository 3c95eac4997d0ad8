package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/page"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func init() {
	register(command{Name: "webhooks list", Summary: "webhook subscriptions with status and pending count", Setup: setupWebhooksList})
	register(command{Name: "webhooks create", Summary: "subscribe a URL to a space's events, printing the signing secret once", Setup: setupWebhooksCreate})
	register(command{Name: "webhooks disable", Args: "SUBSCRIPTION_ID", Summary: "disable a subscription by hand", Setup: setupWebhooksDisable})
	register(command{Name: "webhooks enable", Args: "SUBSCRIPTION_ID", Summary: "re-enable a subscription from the current head, or with what it missed (--from backlog)", Setup: setupWebhooksEnable})
	register(command{Name: "webhooks rotate-secret", Args: "SUBSCRIPTION_ID", Summary: "new signing secret; the old one still signs for --overlap", Setup: setupWebhooksRotate})
	register(command{Name: "webhooks deliveries", Args: "SUBSCRIPTION_ID", Summary: "a subscription's deliveries and attempts", Setup: setupWebhooksDeliveries})
}

// subscriptionID parses the command's one argument.
func subscriptionID(c *call) (uuid.UUID, error) {
	id, err := uuid.Parse(c.args[0])
	if err != nil {
		return uuid.Nil, fmt.Errorf("%w: %q is not a subscription ID", errUsage, c.args[0])
	}
	return id, nil
}

// subscriptionView is s as --json prints it: the API's view, with the
// URL's query hidden as in the tables.
func subscriptionView(s *webhooks.Subscription) webhooks.SubscriptionView {
	v := webhooks.NewSubscriptionView(s)
	v.URL = redactURL(v.URL)
	return v
}

func setupWebhooksList(fs *flag.FlagSet) func(context.Context, *call) error {
	owner := fs.String("owner", "", "only this owner's subscriptions")
	space := fs.String("space", "", "only subscriptions on this space")
	limit := fs.Int("limit", 0, "at most this many, in creation order; more are announced on stderr with their --cursor (0: all)")
	cursor := fs.String("cursor", "", "start after the page that announced this cursor")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		after, err := page.Decode("webhooks", *cursor) // the HTTP API's cursors of GET /v1/webhooks
		if err != nil || *limit < 0 {
			return fmt.Errorf("%w: --cursor or --limit: %v", errUsage, cmp.Or(err, errors.New("want 0 or more")))
		}
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		p := &webhooks.ListParams{Owner: *owner, Space: *space, AfterCreatedAt: after.Time, AfterID: after.ID}
		if *limit > 0 {
			p.Limit = *limit + 1
		}
		subs, err := webhooks.List(ctx, pool, p)
		if err != nil {
			return err
		}
		if *limit > 0 && len(subs) > *limit {
			subs = subs[:*limit]
			last := subs[len(subs)-1]
			defer fmt.Fprintf(c.stderr, "more follow: --cursor %s\n", page.Key{List: "webhooks", Time: last.CreatedAt, ID: last.ID}.Encode())
		}
		if err := postgres.Durable(ctx, pool); err != nil { // pending counts come from rounds
			return err
		}
		if *asJSON {
			out := []webhooks.SubscriptionView{}
			for _, s := range subs {
				out = append(out, subscriptionView(s))
			}
			return c.printJSON(out)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tOWNER\tSPACE\tSTATUS\tLAST_DELIVERED\tPENDING\tEVENTS\tPOLICY\tURL")
		for _, s := range subs {
			status := s.Status
			if s.Probing {
				status += " (" + s.DisabledCause + ", probing)"
			} else if s.DisabledCause != "" {
				status += " (" + s.DisabledCause + ")"
			}
			types := strings.Join(s.EventTypes, ",")
			if types == "" {
				types = "*"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", s.ID, s.Owner, s.Space, status, s.LastDeliveredSeq, s.Pending, types,
				policyOf(s), redactURL(s.URL))
		}
		return tw.Flush()
	}
}

// redactURL hides a URL's query, which often carries a credential.
func redactURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}

func setupWebhooksCreate(fs *flag.FlagSet) func(context.Context, *call) error {
	owner := fs.String("owner", "", "principal the deliveries act for (required; needs read on the space)")
	space := fs.String("space", "", "space whose events are delivered (required)")
	url := fs.String("url", "", "absolute http(s) target URL (required)")
	events := fs.String("events", "", "comma-separated event types: item.created, item.* or * (default all)")
	token := fs.String("token", "", "token ID whose current scopes bound every delivery (default: the owner's full rights)")
	headers := headerFlag{}
	fs.Var(headers, "header", "a custom header sent with every request, \"Name: value\" (repeatable; the value is shown masked only)")
	pf := addPolicyFlags(fs)
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		if *owner == "" || *space == "" || *url == "" {
			return fmt.Errorf("%w: webhooks create needs --owner, --space and --url", errUsage)
		}
		p := &webhooks.CreateParams{Owner: *owner, Space: *space, URL: *url, Headers: headers, Policy: pf.params()}
		if *events != "" {
			for _, t := range strings.Split(*events, ",") {
				p.EventTypes = append(p.EventTypes, strings.TrimSpace(t))
			}
		}
		if *token != "" {
			id, err := uuid.Parse(*token)
			if err != nil {
				return fmt.Errorf("%w: --token %q is not a token ID", errUsage, *token)
			}
			p.TokenID = &id
		}
		cfg, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		p.AllowPrivateTargets = cfg.Webhooks.AllowPrivateTargets
		p.Limits = &webhooks.Limits{MaxEventTypes: cfg.Webhooks.MaxEventTypes,
			MaxSubscriptionsPerSpace: cfg.Webhooks.MaxSubscriptionsPerSpace, MaxSubscriptionsPerOwner: cfg.Webhooks.MaxSubscriptionsPerOwner,
			EventRetention: cfg.Sync.EventRetention}
		s, secret, err := webhooks.Create(ctx, pool, postgres.CursorStore{}, p)
		if err != nil {
			return err
		}
		if *asJSON {
			v := subscriptionView(s)
			v.Secret = secret
			return c.printJSON(v)
		}
		fmt.Fprintf(c.stdout, "subscription %s created on space %s, starting after seq %d, policy %s\n", s.ID, s.Space, s.ResumeAfterSeq, policyOf(s))
		fmt.Fprintf(c.stdout, "signing secret (shown once; give it to the receiver): %s\n", secret)
		return nil
	}
}

func setupWebhooksDisable(fs *flag.FlagSet) func(context.Context, *call) error {
	reason := fs.String("reason", "disabled by hand", "note stored with the subscription")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		if err := webhooks.Disable(ctx, pool, id, *reason); err != nil {
			return err
		}
		if *asJSON {
			s, err := webhooks.Get(ctx, pool, id)
			if err != nil {
				return err
			}
			return c.printJSON(subscriptionView(s))
		}
		fmt.Fprintf(c.stdout, "subscription %s disabled (manual)\n", id)
		return nil
	}
}

func setupWebhooksEnable(fs *flag.FlagSet) func(context.Context, *call) error {
	from := fs.String("from", "head", "head: resume at the head, skipping what it missed; backlog: send its pending deliveries and the events committed while disabled, while the log holds them")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		if *from != "head" && *from != "backlog" {
			return fmt.Errorf("%w: --from %q: want head or backlog", errUsage, *from)
		}
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		res, err := enableFrom(ctx, pool, id, *from)
		if err != nil {
			return err
		}
		if *asJSON {
			s, err := webhooks.Get(ctx, pool, id)
			if err != nil {
				return err
			}
			v := webhooks.NewEnableView(s, *from, res)
			v.Subscription.URL = redactURL(v.Subscription.URL)
			return c.printJSON(v)
		}
		if res.ResumeAfterSeq == 0 && res.WasCause == "" {
			fmt.Fprintf(c.stdout, "subscription %s was already active\n", id)
			return nil
		}
		if *from == "backlog" {
			printEnabledFromBacklog(c, id, res)
			return nil
		}
		fmt.Fprintf(c.stdout, "subscription %s enabled (was disabled: %s); it resumes from the current head: events after seq %d are delivered\n",
			id, res.WasCause, res.ResumeAfterSeq)
		if res.NotDeliveredTo > 0 {
			fmt.Fprintf(c.stdout, "events of its space in seq %d..%d were NOT delivered and never will be (%d pending deliveries skipped); resynchronize the receiver from the source\n",
				res.NotDeliveredFrom, res.NotDeliveredTo, res.Skipped)
		}
		return nil
	}
}

func setupWebhooksRotate(fs *flag.FlagSet) func(context.Context, *call) error {
	overlap := fs.Duration("overlap", 24*time.Hour, "how long the old secret still signs as well (0: stop at once)")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		secret, err := webhooks.RotateSecret(ctx, pool, id, *overlap)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(webhooks.NewRotateView(secret, *overlap, time.Now()))
		}
		fmt.Fprintf(c.stdout, "new signing secret for %s (shown once): %s\n", id, secret)
		if *overlap > 0 {
			fmt.Fprintf(c.stdout, "requests carry signatures with the old and the new secret for %s\n", *overlap)
		}
		return nil
	}
}

func setupWebhooksDeliveries(fs *flag.FlagSet) func(context.Context, *call) error {
	status := fs.String("status", "", "pending, delivered, dead or skipped (default all)")
	limit := fs.Int("limit", 50, "newest first, at most this many; more are announced on stderr with their --cursor")
	cursor := fs.String("cursor", "", "start after the page that announced this cursor (older deliveries)")
	attempts := fs.Bool("attempts", false, "also list every attempt of each delivery")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		before, err := deliveriesPage(id, *cursor, *limit)
		if err != nil {
			return err
		}
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		ds, err := webhooks.Deliveries(ctx, pool, &webhooks.DeliveriesParams{SubscriptionID: id, Status: *status, Limit: *limit + 1, BeforeSeq: before.Seq})
		if err != nil {
			return err
		}
		if len(ds) > *limit {
			ds = ds[:*limit]
			defer fmt.Fprintf(c.stderr, "more follow: --cursor %s\n", page.Key{List: "deliveries", ID: id, Seq: ds[len(ds)-1].Seq}.Encode())
		}
		if err := postgres.Durable(ctx, pool); err != nil { // deliveries are made by rounds
			return err
		}
		as, err := deliveryAttempts(ctx, pool, id, ds, *attempts)
		if err != nil {
			return err
		}
		if *asJSON {
			out := make([]webhooks.DeliveryView, 0, len(ds))
			for i := range ds {
				out = append(out, webhooks.NewDeliveryView(&ds[i], as[i], *attempts))
			}
			return c.printJSON(out)
		}
		return printDeliveries(c, ds, as)
	}
}

// deliveriesPage checks --cursor and --limit and returns the page the
// cursor starts after: the HTTP API's cursors of subscription id's
// deliveries.
func deliveriesPage(id uuid.UUID, cursor string, limit int) (page.Key, error) {
	before, err := page.Decode("deliveries", cursor)
	if err == nil && before.Seq != 0 && before.ID != id {
		err = page.ErrBadCursor
	}
	if err != nil || limit < 1 {
		return page.Key{}, fmt.Errorf("%w: --cursor or --limit: %v", errUsage, cmp.Or(err, errors.New("want 1 or more")))
	}
	return before, nil
}

// deliveryAttempts returns the attempts of each of the deliveries ds of
// subscription id if they are wanted, or none for each.
func deliveryAttempts(ctx context.Context, q authz.Querier, id uuid.UUID, ds []webhooks.Delivery, want bool) ([][]webhooks.Attempt, error) {
	as := make([][]webhooks.Attempt, len(ds))
	if !want {
		return as, nil
	}
	for i, d := range ds {
		var err error
		if as[i], err = webhooks.Attempts(ctx, q, id, d.Seq); err != nil {
			return nil, err
		}
	}
	return as, nil
}

// printDeliveries prints deliveries ds as a table, each followed by its
// attempts as.
func printDeliveries(c *call, ds []webhooks.Delivery, as [][]webhooks.Attempt) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tWEBHOOK-ID\tSTATUS\tATTEMPTS\tCREATED\tNEXT_ATTEMPT\tLAST_ERROR")
	for i, d := range ds {
		next := ""
		if d.NextAttemptAt != nil && d.Status == webhooks.DeliveryPending {
			next = d.NextAttemptAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", d.Seq, d.EventID, d.Status, d.Attempts, d.CreatedAt.UTC().Format(time.RFC3339), next, d.LastError)
		for _, a := range as[i] {
			code := "-"
			if a.StatusCode != nil {
				code = fmt.Sprint(*a.StatusCode)
			}
			fmt.Fprintf(tw, "\t  attempt\t%s\t%s\t%s\t\t%s\n", code, a.Duration.Round(time.Microsecond), a.At.UTC().Format(time.RFC3339Nano), a.Error)
		}
	}
	return tw.Flush()
}
