package delivery_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// redisDest is a Redis Streams destination object as the API takes it.
const redisDest = `{"kind":"redis","url":"redis://:s3cret-pw@127.0.0.1:6379/0","key":"bothy:{space}"}`

func TestCreate_RedisDestinationIsOrdered(t *testing.T) {
	t.Parallel()

	t.Run("RefusesUnordered", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		unordered := webhooks.PolicyUnordered
		_, _, err := webhooks.Create(context.Background(), b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice",
			Space: "s1", Destination: json.RawMessage(redisDest), AllowPrivateTargets: true,
			Policy: &webhooks.PolicyParams{Name: &unordered}})
		require.ErrorIs(t, err, webhooks.ErrInvalid)
		require.ErrorContains(t, err, "policy: a redis destination takes ordered delivery")
		require.NotContains(t, err.Error(), "s3cret-pw")
	})

	t.Run("RefusesAPatchToUnordered", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		s, _ := b.subscribe(t, &webhooks.CreateParams{Destination: json.RawMessage(redisDest)})
		unordered := webhooks.PolicyUnordered
		_, err := webhooks.Update(context.Background(), b.db.Pool, s.ID, &webhooks.UpdateParams{Policy: &webhooks.PolicyParams{Name: &unordered}})
		require.ErrorIs(t, err, webhooks.ErrInvalid)
		require.ErrorContains(t, err, "policy")
		require.Equal(t, webhooks.PolicyOrdered, b.sub(t, s.ID).Policy.Name, "unchanged")
	})

	t.Run("RefusesAPatchOfAnUnorderedSubscriptionToRedis", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		unordered := webhooks.PolicyUnordered
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x", Policy: &webhooks.PolicyParams{Name: &unordered}})
		_, err := webhooks.Update(context.Background(), b.db.Pool, s.ID, &webhooks.UpdateParams{Destination: json.RawMessage(redisDest),
			AllowPrivateTargets: true})
		require.ErrorIs(t, err, webhooks.ErrInvalid)
		require.ErrorContains(t, err, "policy")
	})
}
