package webhooks_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// TestUnordered_TakesOverFromADeadSender: as TestDelivery_TakesOverFromADeadSender
// for an unordered subscription, whose deliveries carry claims of their own
// (claim_owner): the delivery a dead process had in flight is sent again by
// a live one within seconds, although its claim would hold for minutes.
func TestUnordered_TakesOverFromADeadSender(t *testing.T) {
	t.Parallel()
	deliveryOwner := func(t *testing.T, b *bundle, sub uuid.UUID, seq int64) string {
		var owner string
		require.NoError(t, b.db.Pool.QueryRow(context.Background(),
			`SELECT claim_owner FROM webhook_deliveries WHERE subscription_id = $1 AND event_seq = $2
			 AND claim_until > now() + interval '1 minute'`, sub, seq).Scan(&owner))
		return owner
	}
	sent, got := deadSenderTakeover(t,
		&webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(1)}, deliveryOwner)
	slices.Sort(got)
	require.Equal(t, sent, got, "the dead sender's delivery and the next, once each")
}
