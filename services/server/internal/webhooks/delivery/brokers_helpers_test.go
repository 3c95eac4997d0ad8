package delivery_test

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/delivery"
)

// slowDefaults is a delivery configuration whose own retry schedule would
// not retry within a test: whatever retries happens by the subscription's
// schedule.
func slowDefaults() *delivery.DeliverConfig {
	cfg := fastRetries()
	cfg.RetryBase, cfg.RetryMax, cfg.RetryBudget = time.Hour, time.Hour, 72*time.Hour
	return cfg
}

// quickSchedule is a per-subscription schedule fast enough for tests.
func quickSchedule(p *webhooks.PolicyParams, budget time.Duration) *webhooks.PolicyParams {
	p.RetryBase, p.RetryMax, p.RetryBudget = new(100*time.Millisecond), new(200*time.Millisecond), new(budget)
	return p
}

func (b *bundle) resend(id uuid.UUID, seq int64) (*webhooks.Delivery, error) {
	return webhooks.Resend(context.Background(), b.db.Pool, &webhooks.ResendParams{SubscriptionID: id, Seq: seq, Events: b.log, Jobs: b.river})
}

func seqs(evs ...sync.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}
