package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func init() {
	register(command{Name: "webhooks update", Args: "SUBSCRIPTION_ID", Summary: "change a subscription's URL, event types or custom headers", Setup: setupWebhooksUpdate})
	register(command{Name: "webhooks delete", Args: "SUBSCRIPTION_ID", Summary: "delete a subscription with its delivery records", Setup: setupWebhooksDelete})
	register(command{Name: "webhooks test", Args: "SUBSCRIPTION_ID", Summary: "send a signed test message to the receiver and show its answer", Setup: setupWebhooksTest})
}

// headerFlag collects repeated --header "Name: value" flags.
type headerFlag map[string]string

func (h headerFlag) String() string { return "" }

func (h headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want \"Name: value\"")
	}
	h[strings.TrimSpace(name)] = strings.TrimSpace(value)
	return nil
}

// listFlag collects a repeated flag's values.
type listFlag []string

func (l *listFlag) String() string { return "" }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func setupWebhooksUpdate(fs *flag.FlagSet) func(context.Context, *call) error {
	url := fs.String("url", "", "new absolute http(s) target URL")
	events := fs.String("events", "", "new comma-separated event types; \"*\" for all")
	set := headerFlag{}
	fs.Var(set, "header", "set a custom header sent with every request, \"Name: value\" (repeatable; the value is shown masked only)")
	var remove listFlag
	fs.Var(&remove, "remove-header", "remove a custom header by name (repeatable)")
	pf := addPolicyFlags(fs)
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		p := &webhooks.UpdateParams{}
		if *url != "" {
			p.URL = url
		}
		if *events != "" {
			types := []string{}
			for _, t := range strings.Split(*events, ",") {
				if t = strings.TrimSpace(t); t != "*" {
					types = append(types, t)
				}
			}
			p.EventTypes = &types
		}
		if len(set) > 0 || len(remove) > 0 {
			p.Headers = map[string]*string{}
			for k, v := range set {
				p.Headers[k] = &v
			}
			for _, k := range remove {
				p.Headers[k] = nil
			}
		}
		p.Policy = pf.params()
		if p.URL == nil && p.EventTypes == nil && p.Headers == nil && p.Policy == nil {
			return fmt.Errorf("%w: nothing to change: give --url, --events, --header, --remove-header or a policy flag", errUsage)
		}
		cfg, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		p.AllowPrivateTargets = cfg.Webhooks.AllowPrivateTargets
		p.Limits = &webhooks.Limits{MaxEventTypes: cfg.Webhooks.MaxEventTypes, EventRetention: cfg.Sync.EventRetention}
		s, err := webhooks.Update(ctx, pool, id, p)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(subscriptionView(s))
		}
		fmt.Fprintf(c.stdout, "subscription %s updated: %s, events %s, headers %s, policy %s\n", s.ID, redactURL(s.URL), typesOf(s), headersOf(s), policyOf(s))
		return nil
	}
}

// typesOf shows a subscription's filter as the tables do.
func typesOf(s *webhooks.Subscription) string {
	if len(s.EventTypes) == 0 {
		return "*"
	}
	return strings.Join(s.EventTypes, ",")
}

// headersOf shows a subscription's custom headers with masked values.
func headersOf(s *webhooks.Subscription) string {
	if len(s.Headers) == 0 {
		return "-"
	}
	masked := webhooks.MaskHeaders(s.Headers)
	var out []string
	for k, v := range masked {
		out = append(out, k+": "+v)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func setupWebhooksDelete(fs *flag.FlagSet) func(context.Context, *call) error {
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
		n, err := webhooks.Delete(ctx, pool, postgres.CursorStore{}, id)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(struct {
				ID         uuid.UUID `json:"id"`
				Deleted    bool      `json:"deleted"`
				Deliveries int64     `json:"deliveries"`
			}{id, true, n})
		}
		fmt.Fprintf(c.stdout, "subscription %s deleted with its %d delivery records; nothing more is sent for it\n", id, n)
		return nil
	}
}

func setupWebhooksTest(fs *flag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		cfg, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		tester, err := webhooks.NewTester(&webhooks.DeliverConfig{AllowPrivateTargets: cfg.Webhooks.AllowPrivateTargets,
			Timeout: cfg.Webhooks.Timeout, MaxResponseBytes: cfg.Webhooks.MaxResponseBytes})
		if err != nil {
			return err
		}
		res, err := tester.Send(ctx, pool, id)
		if err != nil {
			return err
		}
		if *asJSON {
			if err := c.printJSON(res.View()); err != nil {
				return err
			}
		} else if res.Error == "" {
			fmt.Fprintf(c.stdout, "receiver answered %d in %s (test message %s)\n", res.StatusCode, res.Latency.Round(time.Millisecond), res.MessageID)
		}
		if res.Error != "" {
			return fmt.Errorf("test message %s failed after %s: %s", res.MessageID, res.Latency.Round(time.Millisecond), res.Error)
		}
		return nil
	}
}
