package kinds_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/kinds"
)

// TestFields: each broker kind lists its Config's JSON fields, in order,
// with the url (its credentials) marked, and what may be left out.
func TestFields(t *testing.T) {
	t.Parallel()
	require.Equal(t, []outbound.Field{{Name: "url", Credential: true}, {Name: "exchange"}, {Name: "routing_key", Optional: true}},
		kinds.All["rabbitmq"].Fields)
	require.Equal(t, []outbound.Field{{Name: "url", Credential: true}, {Name: "key"}, {Name: "maxlen", Number: true, Optional: true}},
		kinds.All["redis"].Fields)
	require.Equal(t, []outbound.Field{{Name: "url", Credential: true}, {Name: "subject"}, {Name: "stream", Optional: true}},
		kinds.All["jetstream"].Fields)
	require.Equal(t, []outbound.Field{{Name: "url", Credential: true}, {Name: "topic"}}, kinds.All["mqtt"].Fields)
	require.Empty(t, kinds.All[outbound.KindHTTP].Fields, "an http destination is the subscription's url")
}
