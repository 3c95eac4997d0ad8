package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func init() {
	for _, c := range []command{
		{Name: "webhooks update", Args: "SUBSCRIPTION_ID", Summary: "change a subscription's URL, event types, custom headers or delivery policy", Setup: setupWebhooksUpdate},
		{Name: "webhooks delete", Args: "SUBSCRIPTION_ID", Summary: "delete a subscription with its delivery records", Setup: setupWebhooksDelete},
		{Name: "webhooks test", Args: "SUBSCRIPTION_ID", Summary: "send a signed test message to the receiver and show its answer", Setup: setupWebhooksTest},
		{Name: "webhooks preview", Args: "SUBSCRIPTION_ID", Summary: "try a filter and a transform on the space's recent events or a given one, saving and sending nothing", Setup: setupWebhooksPreview},
	} {
		c.Remote = true
		register(c)
	}
}

// headerFlag collects repeated --header "Name: value" flags.
type headerFlag map[string]string

func (h headerFlag) String() string { return "" }
func (h headerFlag) Type() string   { return "\"Name: value\"" }

func (h headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want \"Name: value\"")
	}
	h[strings.TrimSpace(name)] = strings.TrimSpace(value)
	return nil
}

func setupWebhooksUpdate(fs *pflag.FlagSet) func(context.Context, *call) error {
	url := fs.String("url", "", "new absolute http(s) target URL (makes the destination http)")
	dest := destinationFlag(fs)
	events := fs.String("events", "", "new comma-separated event types; \"*\" for all")
	set := headerFlag{}
	fs.Var(set, "header", "set a custom header sent with every request, \"Name: value\" (repeatable; the value is shown masked only)")
	remove := fs.StringArray("remove-header", nil, "remove a custom header by name (repeatable)")
	filter := fs.String("filter", "", "new CEL filter over the event; \"\" removes it")
	transform := fs.String("transform", "", "new CEL transform of the body; \"\" removes it")
	pf := addPolicyFlags(fs)
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		req := &webhooks.UpdateRequest{PolicyRequest: pf.request()}
		if *url != "" {
			req.URL = url
		}
		if req.Destination, err = readDestination(*dest); err != nil {
			return err
		}
		if *events != "" {
			types := []string{}
			for _, t := range strings.Split(*events, ",") {
				if t = strings.TrimSpace(t); t != "*" {
					types = append(types, t)
				}
			}
			req.EventTypes = &types
		}
		if len(set) > 0 || len(*remove) > 0 {
			req.Headers = map[string]*string{}
			for k, v := range set {
				req.Headers[k] = &v
			}
			for _, k := range *remove {
				req.Headers[k] = nil
			}
		}
		if c.fs.Changed("filter") {
			req.Filter = filter
		}
		if c.fs.Changed("transform") {
			req.Transform = transform
		}
		if req.Empty() {
			return fmt.Errorf("%w: nothing to change: give --url, --destination, --events, --header, --remove-header, --filter, --transform or a policy flag", errUsage)
		}
		svc, done, err := c.webhooks(ctx)
		if err != nil {
			return err
		}
		defer done()
		s, err := svc.Update(ctx, id, req)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printSubscription(s)
		}
		fmt.Fprintf(c.stdout, "subscription %s updated: %s, events %s, headers %s, policy %s\n", s.ID, targetOf(&s), typesOf(&s), headersOf(&s),
			policyOf(&s.PolicyView))
		return nil
	}
}

// typesOf shows a subscription's filter as the tables do.
func typesOf(s *webhooks.SubscriptionView) string {
	if len(s.EventTypes) == 0 {
		return "*"
	}
	return strings.Join(s.EventTypes, ",")
}

// headersOf shows a subscription's custom headers, masked as the view has
// them.
func headersOf(s *webhooks.SubscriptionView) string {
	if len(s.Headers) == 0 {
		return "-"
	}
	var out []string
	for k, v := range s.Headers {
		out = append(out, k+": "+v)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func setupWebhooksDelete(fs *pflag.FlagSet) func(context.Context, *call) error {
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
		n, err := svc.Delete(ctx, id)
		if err != nil {
			return err
		}
		if *asJSON {
			// Deliveries is absent through the API, which does not count
			// them.
			return c.printJSON(struct {
				ID         string `json:"id"`
				Deleted    bool   `json:"deleted"`
				Deliveries *int64 `json:"deliveries,omitempty"`
			}{id.String(), true, n})
		}
		if n == nil {
			fmt.Fprintf(c.stdout, "subscription %s deleted with its delivery records; nothing more is sent for it\n", id)
		} else {
			fmt.Fprintf(c.stdout, "subscription %s deleted with its %d delivery records; nothing more is sent for it\n", id, *n)
		}
		return nil
	}
}

func setupWebhooksTest(fs *pflag.FlagSet) func(context.Context, *call) error {
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
		res, err := svc.Test(ctx, id)
		if err != nil {
			return err
		}
		took := time.Duration(res.LatencySeconds * float64(time.Second)).Round(time.Millisecond)
		if *asJSON {
			if err := c.printJSON(res); err != nil {
				return err
			}
		} else if res.OK {
			fmt.Fprintf(c.stdout, "receiver answered %d in %s (test message %s)\n", *res.StatusCode, took, res.MessageID)
		}
		if !res.OK {
			return fmt.Errorf("test message %s failed after %s: %s", res.MessageID, took, res.Error)
		}
		return nil
	}
}
