package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// policyFlags are the delivery policy flags of webhooks create and update.
// Only the flags given change anything; 0 returns a value to its default.
type policyFlags struct {
	fs                            *pflag.FlagSet
	policy                        *string
	maxInFlight, maxBatch         *int
	autoRecover                   *bool
	maxRPS                        *float64
	retryBase, retryMax, retryBud *time.Duration
}

func addPolicyFlags(fs *pflag.FlagSet) *policyFlags {
	return &policyFlags{fs: fs,
		policy: fs.String("policy", "", "ordered (one at a time, in seq order; a spent retry budget disables), ordered_dead_letter "+
			"(in order; a spent budget makes the delivery dead and goes on) or unordered (parallel; for receivers that dedupe by webhook-id)"),
		maxInFlight: fs.Int("max-in-flight", 0, "unordered only: requests in flight at once, 1..100 (default 10)"),
		maxBatch:    fs.Int("max-batch", 0, "ordered policies only: up to this many consecutive events per request, as a JSON array, 1..1000 (0: one per request)"),
		autoRecover: fs.Bool("auto-recover", false, "probe a subscription disabled as failing with its head delivery and resume it on a 2xx"),
		maxRPS:      fs.Float64("max-rps", 0, "at most this many requests per second, 0.1..1000 (0: no limit)"),
		retryBase:   fs.Duration("retry-base", 0, "first retry's wait, doubling per attempt, 100ms..1h (0: the server's, 5s)"),
		retryMax:    fs.Duration("retry-max", 0, "longest wait between attempts, also for Retry-After, 100ms..24h (0: the server's, 1h)"),
		retryBud:    fs.Duration("retry-budget", 0, "how long a delivery is retried, 1s..720h and below sync.event_retention (0: webhooks.retry_budget)"),
	}
}

// request returns what the flags given on the command line change, as the
// API's request has it.
func (f *policyFlags) request() webhooks.PolicyRequest {
	var p webhooks.PolicyRequest
	secs := func(d *time.Duration) *float64 {
		s := d.Seconds()
		return &s
	}
	f.fs.Visit(func(fl *pflag.Flag) {
		switch fl.Name {
		case "policy":
			p.Policy = f.policy
		case "max-in-flight":
			p.MaxInFlight = f.maxInFlight
		case "max-batch":
			p.MaxBatch = f.maxBatch
		case "auto-recover":
			p.AutoRecover = f.autoRecover
		case "max-rps":
			p.MaxRequestsPerSecond = f.maxRPS
		case "retry-base":
			p.RetryBaseSeconds = secs(f.retryBase)
		case "retry-max":
			p.RetryMaxSeconds = secs(f.retryMax)
		case "retry-budget":
			p.RetryBudgetSeconds = secs(f.retryBud)
		}
	})
	return p
}

// policyOf sums a subscription's policy up for the tables: the policy, its
// requests in flight, the throttle, auto-recover and a schedule that is
// not the server's.
func policyOf(p *webhooks.PolicyView) string {
	parts := []string{p.Policy}
	if p.MaxInFlight > 0 {
		parts[0] += fmt.Sprintf("/%d", p.MaxInFlight)
	}
	if p.MaxBatch > 0 {
		parts = append(parts, fmt.Sprintf("batch %d", p.MaxBatch))
	}
	if p.MaxRequestsPerSecond != nil {
		parts = append(parts, fmt.Sprintf("%g/s", *p.MaxRequestsPerSecond))
	}
	if p.AutoRecover {
		parts = append(parts, "auto-recover")
	}
	for _, d := range []struct {
		name string
		secs *float64
	}{{"base", p.RetryBaseSeconds}, {"max", p.RetryMaxSeconds}, {"budget", p.RetryBudgetSeconds}} {
		if d.secs != nil {
			parts = append(parts, d.name+" "+time.Duration(*d.secs*float64(time.Second)).String())
		}
	}
	return strings.Join(parts, ",")
}
