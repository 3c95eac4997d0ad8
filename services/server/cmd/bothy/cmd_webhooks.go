package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func init() {
	for _, c := range []command{
		{Name: "webhooks list", Summary: "webhook subscriptions with status and pending count", Setup: setupWebhooksList},
		{Name: "webhooks create", Summary: "subscribe a URL to a space's events, printing the signing secret once", Setup: setupWebhooksCreate},
		{Name: "webhooks disable", Args: "SUBSCRIPTION_ID", Summary: "disable a subscription by hand", Setup: setupWebhooksDisable},
		{Name: "webhooks enable", Args: "SUBSCRIPTION_ID", Summary: "re-enable a subscription from the current head, or with what it missed (--from backlog)", Setup: setupWebhooksEnable},
		{Name: "webhooks rotate-secret", Args: "SUBSCRIPTION_ID", Summary: "new signing secret; the old one still signs for --overlap", Setup: setupWebhooksRotate},
		{Name: "webhooks deliveries", Args: "SUBSCRIPTION_ID", Summary: "a subscription's deliveries and attempts", Setup: setupWebhooksDeliveries},
	} {
		c.Remote = true
		register(c)
	}
}

// subscriptionID parses the command's first argument.
func subscriptionID(c *call) (uuid.UUID, error) {
	id, err := uuid.Parse(c.args[0])
	if err != nil {
		return uuid.Nil, fmt.Errorf("%w: %q is not a subscription ID", errUsage, c.args[0])
	}
	return id, nil
}

// printSubscription prints v as --json does: the API's view, with the
// URL's query hidden as in the tables, since it often carries a credential.
func (c *call) printSubscription(v webhooks.SubscriptionView) error {
	v.URL = redactURL(v.URL)
	return c.printJSON(v)
}

// targetOf shows where a subscription's messages go as the tables do: an
// http destination's URL with its query hidden, a broker's kind and
// fields (credentials come masked from the API).
func targetOf(s *webhooks.SubscriptionView) string {
	if s.URL != "" {
		return redactURL(s.URL)
	}
	return string(s.Destination)
}

// destinationFlag adds --destination to fs.
func destinationFlag(fs *pflag.FlagSet) *string {
	return fs.String("destination", "", `a broker destination as JSON, {"kind":"rabbitmq","url":"amqp://user:password@host:5672/vhost",`+
		`"exchange":"events","routing_key":"{space}.{type}"}, or @file to read it from a file (keeps the password off the command line)`)
}

// readDestination reads --destination: JSON, or @file; nil when not given.
func readDestination(v string) (json.RawMessage, error) {
	if v == "" {
		return nil, nil
	}
	b := []byte(v)
	if path, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if b, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("%w: --destination: %w", errUsage, err)
		}
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%w: --destination: not JSON", errUsage)
	}
	return json.RawMessage(b), nil
}

// redactURL hides a URL's query.
func redactURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}

// moreFollow announces on stderr the cursor of the next page, if any.
func (c *call) moreFollow(next string) {
	if next != "" {
		fmt.Fprintf(c.stderr, "more follow: --cursor %s\n", next)
	}
}

func setupWebhooksList(fs *pflag.FlagSet) func(context.Context, *call) error {
	q := &listQuery{}
	fs.StringVar(&q.Owner, "owner", "", "only this owner's subscriptions (on the database only)")
	fs.StringVar(&q.Space, "space", "", "only subscriptions on this space")
	fs.IntVar(&q.Limit, "limit", 0, "at most this many, in creation order; more are announced on stderr with their --cursor (0: all)")
	fs.StringVar(&q.Cursor, "cursor", "", "start after the page that announced this cursor")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		if q.Limit < 0 {
			return fmt.Errorf("%w: --limit %d: want 0 or more", errUsage, q.Limit)
		}
		svc, done, err := c.webhooks(ctx)
		if err != nil {
			return err
		}
		defer done()
		subs, next, err := svc.List(ctx, q)
		if err != nil {
			return err
		}
		defer c.moreFollow(next)
		if *asJSON {
			for i := range subs {
				subs[i].URL = redactURL(subs[i].URL)
			}
			return c.printJSON(subs)
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
			last := "-" // nothing delivered: last_delivered_seq is only where the sender resumes
			if s.LastSuccessSeq != nil {
				last = strconv.FormatInt(*s.LastSuccessSeq, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.ID, s.Owner, s.Space, status, last, s.Pending,
				typesOf(&s), policyOf(&s.PolicyView), targetOf(&s))
		}
		return tw.Flush()
	}
}

func setupWebhooksCreate(fs *pflag.FlagSet) func(context.Context, *call) error {
	owner := fs.String("owner", "", "principal the deliveries act for (required on the database; needs read on the space; through --server: the token's)")
	space := fs.String("space", "", "space whose events are delivered (required)")
	url := fs.String("url", "", "absolute http(s) target URL (required unless --destination)")
	dest := destinationFlag(fs)
	events := fs.String("events", "", "comma-separated event types: item.created, item.* or * (default all)")
	tokenID := fs.String("token-id", "", "on the database: ID of the token whose current scopes bound every delivery (default: the owner's full rights); "+
		"through --server the calling token does")
	headers := headerFlag{}
	fs.Var(headers, "header", "a custom header sent with every request, \"Name: value\" (repeatable; the value is shown masked only)")
	filter := fs.String("filter", "", "CEL expression over the event that must be true to deliver it, e.g. \"data.total > 100\" (try it with webhooks preview)")
	transform := fs.String("transform", "", "CEL expression whose value (a map or a list) is the JSON body sent instead of the envelope")
	pf := addPolicyFlags(fs)
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		if *space == "" || (*url == "" && *dest == "") {
			return fmt.Errorf("%w: webhooks create needs --space and --url (or --destination)", errUsage)
		}
		raw, err := readDestination(*dest)
		if err != nil {
			return err
		}
		p := &createParams{Owner: *owner, CreateRequest: webhooks.CreateRequest{Space: *space, URL: *url, Destination: raw, Headers: headers,
			PolicyRequest: pf.request(), Filter: *filter, Transform: *transform}}
		if *events != "" {
			for _, t := range strings.Split(*events, ",") {
				p.EventTypes = append(p.EventTypes, strings.TrimSpace(t))
			}
		}
		if *tokenID != "" {
			id, err := uuid.Parse(*tokenID)
			if err != nil {
				return fmt.Errorf("%w: --token-id %q is not a token ID", errUsage, *tokenID)
			}
			p.TokenID = &id
		}
		svc, done, err := c.webhooks(ctx)
		if err != nil {
			return err
		}
		defer done()
		if _, db := svc.(*dbWebhooks); db && c.fs.Changed("token") {
			return fmt.Errorf("%w: --token is the bearer token for --server; on the database name the delivery token with --token-id", errUsage)
		}
		s, err := svc.Create(ctx, p)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printSubscription(s)
		}
		fmt.Fprintf(c.stdout, "subscription %s created on space %s, starting after seq %d, policy %s\n", s.ID, s.Space, s.ResumeAfterSeq, policyOf(&s.PolicyView))
		fmt.Fprintf(c.stdout, "signing secret (shown once; give it to the receiver): %s\n", s.Secret)
		return nil
	}
}

func setupWebhooksDisable(fs *pflag.FlagSet) func(context.Context, *call) error {
	reason := fs.String("reason", "disabled by hand", "note stored with the subscription")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		svc, done, err := c.webhooks(ctx)
		if err != nil {
			return err
		}
		defer done()
		s, err := svc.Disable(ctx, id, &webhooks.DisableRequest{Reason: *reason})
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printSubscription(s)
		}
		fmt.Fprintf(c.stdout, "subscription %s disabled (%s)\n", id, s.DisabledCause)
		return nil
	}
}

func setupWebhooksEnable(fs *pflag.FlagSet) func(context.Context, *call) error {
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
		svc, done, err := c.webhooks(ctx)
		if err != nil {
			return err
		}
		defer done()
		res, err := svc.Enable(ctx, id, &webhooks.EnableRequest{From: *from})
		if err != nil {
			return err
		}
		if *asJSON {
			res.Subscription.URL = redactURL(res.Subscription.URL)
			return c.printJSON(res)
		}
		printEnabled(c, id, &res)
		return nil
	}
}

// printEnabled tells what enabling subscription id did.
func printEnabled(c *call, id uuid.UUID, res *webhooks.EnableView) {
	switch {
	case res.ResumeAfterSeq == 0 && res.WasCause == "":
		fmt.Fprintf(c.stdout, "subscription %s was already active\n", id)
	case res.From == "backlog":
		fmt.Fprintf(c.stdout, "subscription %s enabled (was disabled: %s) with its backlog: its pending deliveries, %d that had disabled it and %d made for events committed while disabled are sent in seq order, then events after seq %d\n",
			id, res.WasCause, res.Reset, res.Created, res.ResumeAfterSeq)
		if res.NotDelivered != nil {
			fmt.Fprintf(c.stdout, "events of its space in seq %d..%d left the log (retention) and were NOT delivered (%d pending deliveries skipped); resynchronize the receiver from the source\n",
				res.NotDelivered.From, res.NotDelivered.To, res.Skipped)
		}
	default:
		fmt.Fprintf(c.stdout, "subscription %s enabled (was disabled: %s); it resumes from the current head: events after seq %d are delivered\n",
			id, res.WasCause, res.ResumeAfterSeq)
		if res.NotDelivered != nil {
			fmt.Fprintf(c.stdout, "events of its space in seq %d..%d were NOT delivered and never will be (%d pending deliveries skipped); resynchronize the receiver from the source\n",
				res.NotDelivered.From, res.NotDelivered.To, res.Skipped)
		}
	}
}

func setupWebhooksRotate(fs *pflag.FlagSet) func(context.Context, *call) error {
	overlap := fs.Duration("overlap", 24*time.Hour, "how long the old secret still signs as well (0: stop at once)")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		svc, done, err := c.webhooks(ctx)
		if err != nil {
			return err
		}
		defer done()
		res, err := svc.Rotate(ctx, id, *overlap)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(res)
		}
		fmt.Fprintf(c.stdout, "new signing secret for %s (shown once): %s\n", id, res.Secret)
		if res.PreviousSecretUntil != nil {
			fmt.Fprintf(c.stdout, "requests carry signatures with the old and the new secret until %s\n", res.PreviousSecretUntil.Format(time.RFC3339))
		}
		return nil
	}
}

func setupWebhooksDeliveries(fs *pflag.FlagSet) func(context.Context, *call) error {
	q := &deliveriesQuery{}
	fs.StringVar(&q.Status, "status", "", "pending, delivered, dead or skipped (default all)")
	fs.IntVar(&q.Limit, "limit", 50, "newest first, at most this many; more are announced on stderr with their --cursor")
	fs.StringVar(&q.Cursor, "cursor", "", "start after the page that announced this cursor (older deliveries)")
	fs.StringVar(&q.Type, "type", "", "only deliveries of events of this type: item.created, item.* or *")
	fs.StringVar(&q.EventID, "event-id", "", "only the delivery of this event")
	fs.StringVar(&q.Since, "since", "", "only deliveries created at or after this time: RFC 3339, or a duration before now such as 10m")
	fs.StringVar(&q.Until, "until", "", "only deliveries created before this time: RFC 3339, or a duration before now such as 10m")
	attempts := fs.Bool("attempts", false, "also list every attempt of each delivery")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		if q.Limit < 1 {
			return fmt.Errorf("%w: --limit %d: want 1 or more", errUsage, q.Limit)
		}
		if err := resolveTimes(time.Now(), timeFlag{"--since", &q.Since}, timeFlag{"--until", &q.Until}); err != nil {
			return err
		}
		svc, done, err := c.webhooks(ctx)
		if err != nil {
			return err
		}
		defer done()
		ds, next, err := svc.Deliveries(ctx, id, q)
		if err != nil {
			return err
		}
		defer c.moreFollow(next)
		if !*attempts {
			for i := range ds {
				ds[i].AttemptList = nil
			}
		}
		if *asJSON {
			return c.printJSON(ds)
		}
		return printDeliveries(c, ds)
	}
}

// printDeliveries prints deliveries ds as a table, each followed by its
// attempts if it has them.
func printDeliveries(c *call, ds []webhooks.DeliveryView) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tWEBHOOK-ID\tSTATUS\tATTEMPTS\tCREATED\tNEXT_ATTEMPT\tLAST_ERROR")
	for _, d := range ds {
		next := ""
		if d.NextAttemptAt != nil && d.Status == webhooks.DeliveryPending {
			next = d.NextAttemptAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", d.Seq, d.EventID, d.Status, d.Attempts, d.CreatedAt.UTC().Format(time.RFC3339), next, d.LastError)
		if d.AttemptList == nil {
			continue
		}
		for _, a := range *d.AttemptList {
			code := "-"
			if a.StatusCode != nil {
				code = fmt.Sprint(*a.StatusCode)
			}
			took := time.Duration(a.DurationSeconds * float64(time.Second)).Round(time.Microsecond)
			fmt.Fprintf(tw, "\t  attempt\t%s\t%s\t%s\t\t%s\n", code, took, a.At.UTC().Format(time.RFC3339Nano), a.Error)
		}
	}
	return tw.Flush()
}
