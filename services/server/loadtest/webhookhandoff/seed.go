package webhookhandoff

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// target is a (space, event type) and the subscriptions it goes to.
type target struct {
	space, typ string
	subs       []int
}

// subscription is one planned subscription.
type subscription struct {
	target    int
	unordered bool
	secret    string
}

// handoff is one run's state.
type handoff struct {
	opts    *options
	stdout  io.Writer
	private *harness.PrivateServer // nil on the configured server
	scratch *harness.Scratch
	rcv     *receiverProc
	broker  *brokerParams // nil: the subscriptions are HTTP receivers
	targets []target
	subs    []subscription
	subIDs  []uuid.UUID // subscription index -> id
}

const owner = "perf-owner"

// plan lays the subscriptions out: subscription k is on space k mod
// --spaces and filters the type its group of --fanout shares; the last
// --unordered are unordered.
func (h *handoff) plan() {
	o := h.opts
	index := map[[2]string]int{} // (space, type) -> targets index
	for k := range o.subscriptions {
		key := [2]string{fmt.Sprintf("space-%03d", k%o.spaces), fmt.Sprintf("perf.t%03d", k/o.spaces/o.fanout)}
		t, ok := index[key]
		if !ok {
			t = len(h.targets)
			index[key] = t
			h.targets = append(h.targets, target{space: key[0], typ: key[1]})
		}
		h.targets[t].subs = append(h.targets[t].subs, k)
		h.subs = append(h.subs, subscription{target: t, unordered: k >= o.subscriptions-o.unordered})
	}
}

// endpoints makes each subscription's signing secret and returns the
// receiver's endpoints.
func (h *handoff) endpoints() []endpointParams {
	out := make([]endpointParams, len(h.subs))
	for k := range h.subs {
		s := &h.subs[k]
		s.secret, _ = webhooks.NewSecret() // fails only if the system's random source does
		t := &h.targets[s.target]
		out[k] = endpointParams{Secret: s.secret, Ordered: !s.unordered, Space: t.space, Type: t.typ}
	}
	return out
}

// seed creates the writer, the owner with read on every space, and the
// subscriptions, and sets max_batch (--max-batch).
func (h *handoff) seed(ctx context.Context, cfg *config.Config) error {
	pool := h.scratch.Pool
	if err := authz.CreatePrincipal(ctx, pool, "perf-writer", authz.KindApp); err != nil {
		return err
	}
	if err := authz.CreatePrincipal(ctx, pool, owner, authz.KindUser); err != nil {
		return err
	}
	for i := range h.opts.spaces {
		g := &authz.GrantParams{Space: fmt.Sprintf("space-%03d", i), Principal: owner, Right: authz.RightRead}
		if err := authz.Grant(ctx, pool, g); err != nil {
			return err
		}
	}
	limits := app.WebhookLimits(cfg)
	for k, s := range h.subs {
		var policy *webhooks.PolicyParams
		if s.unordered {
			policy = &webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(10)}
		}
		t := &h.targets[s.target]
		p := &webhooks.CreateParams{Owner: owner, Space: t.space, URL: h.rcv.hookURL(k), Secret: s.secret,
			EventTypes: []string{t.typ}, AllowPrivateTargets: true, Policy: policy, Limits: &limits, Filter: h.opts.filter}
		if h.broker != nil {
			dest, err := h.broker.destination(k)
			if err != nil {
				return err
			}
			p.URL, p.Destination = "", dest
		}
		sub, _, err := webhooks.Create(ctx, pool, postgres.CursorStore{}, p)
		if err != nil {
			return fmt.Errorf("subscription %d: %w", k, err)
		}
		h.subIDs = append(h.subIDs, sub.ID)
	}
	return h.setMaxBatch(ctx)
}

// ErrNoMaxBatch is returned for --max-batch when this build's schema has
// no max_batch column.
var ErrNoMaxBatch = errors.New("--max-batch: webhook_subscriptions has no max_batch column in this build (the batched delivery engine adds it)")

// setMaxBatch gives the ordered subscriptions max_batch --max-batch.
func (h *handoff) setMaxBatch(ctx context.Context) error {
	if h.opts.maxBatch == 0 {
		return nil
	}
	var has bool
	err := h.scratch.Pool.QueryRow(ctx, `
SELECT EXISTS (SELECT FROM information_schema.columns
               WHERE table_schema = current_schema() AND table_name = 'webhook_subscriptions' AND column_name = 'max_batch')`).Scan(&has)
	if err != nil {
		return err
	}
	if !has {
		return ErrNoMaxBatch
	}
	_, err = h.scratch.Pool.Exec(ctx, `UPDATE webhook_subscriptions SET max_batch = $1 WHERE policy <> 'unordered'`, h.opts.maxBatch)
	return err
}
