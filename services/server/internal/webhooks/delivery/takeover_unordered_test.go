package delivery_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// TestUnordered_TakesOverFromADeadSender: as TestDelivery_TakesOverFromADeadSender
// for an unordered subscription: the delivery a dead process had in flight
// is sent again by a live one within seconds, although the lease would hold
// for minutes.
func TestUnordered_TakesOverFromADeadSender(t *testing.T) {
	t.Parallel()
	sent, got := deadSenderTakeover(t, &webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(1)})
	slices.Sort(got)
	require.Equal(t, sent, got, "the dead sender's delivery and the next, once each")
}
