package webhooks_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// rabbitDest is a RabbitMQ destination object as the API takes it.
const rabbitDest = `{"kind":"rabbitmq","url":"amqp://bob:s3cret-pw@127.0.0.1:5672/prod","exchange":"events"}`

func TestCreate_Destination(t *testing.T) {
	t.Parallel()

	t.Run("StoresABrokerDestinationAndShowsItMasked", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		s, _ := b.subscribe(t, &webhooks.CreateParams{Destination: json.RawMessage(rabbitDest)})
		got := b.sub(t, s.ID)
		require.Equal(t, "rabbitmq", got.Destination.Kind)
		require.Empty(t, got.URL)
		v, err := json.Marshal(webhooks.NewSubscriptionView(got))
		require.NoError(t, err)
		require.NotContains(t, string(v), "s3cret-pw")
		var view struct {
			Destination map[string]string `json:"destination"`
		}
		require.NoError(t, json.Unmarshal(v, &view))
		require.Equal(t, map[string]string{"kind": "rabbitmq", "url": "amqp://bob:********@127.0.0.1:5672/prod", "exchange": "events",
			"routing_key": "{space}.{type}"}, view.Destination)
	})

	t.Run("AnHTTPDestinationIsItsURL", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		s, _ := b.subscribe(t, &webhooks.CreateParams{Destination: json.RawMessage(`{"kind":"http","url":"http://127.0.0.1:9/x"}`)})
		got := b.sub(t, s.ID)
		require.Equal(t, "http://127.0.0.1:9/x", got.URL)
		require.Equal(t, "http", got.Destination.Kind)
		require.JSONEq(t, `{"kind":"http"}`, string(webhooks.NewSubscriptionView(got).Destination))
	})

	t.Run("RefusesBadFieldsNamingThem", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for raw, want := range map[string]string{
			`{"kind":"rabbitmq","url":"amqp://h/"}`:                    "destination.exchange",
			`{"kind":"rabbitmq","url":"amqp://h/?x=1","exchange":"e"}`: "destination.url",
			`{"kind":"carrier-pigeon"}`:                                "destination.kind",
			`{"url":"http://h/"}`:                                      "destination.kind",
			`[1]`:                                                      "destination: want an object",
			`{"kind":"http","url":"http://h/","exchange":"e"}`:         "destination: an http destination has only url",
		} {
			_, _, err := webhooks.Create(context.Background(), b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice",
				Space: "s1", Destination: json.RawMessage(raw), AllowPrivateTargets: true})
			require.ErrorIs(t, err, webhooks.ErrInvalid, raw)
			require.ErrorContains(t, err, want, raw)
		}
	})

	t.Run("ChecksTheBrokersAddressWithTheEgressPolicy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		_, _, err := webhooks.Create(context.Background(), b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice",
			Space: "s1", Destination: json.RawMessage(rabbitDest)})
		require.ErrorIs(t, err, webhooks.ErrTargetRefused)
		require.ErrorContains(t, err, "destination.url")
		require.ErrorContains(t, err, "webhooks.allow_private_targets")
		require.NotContains(t, err.Error(), "s3cret-pw")
	})

	t.Run("RefusesMaxBatchForABroker", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		n := 10
		_, _, err := webhooks.Create(context.Background(), b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice",
			Space: "s1", Destination: json.RawMessage(rabbitDest), AllowPrivateTargets: true, Policy: &webhooks.PolicyParams{MaxBatch: &n}})
		require.ErrorIs(t, err, webhooks.ErrInvalid)
		require.ErrorContains(t, err, "max_batch")
	})
}

func TestUpdate_Destination(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	s, _ := b.subscribe(t, &webhooks.CreateParams{Destination: json.RawMessage(rabbitDest)})

	n := 10
	_, err := webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Policy: &webhooks.PolicyParams{MaxBatch: &n}})
	require.ErrorIs(t, err, webhooks.ErrInvalid)
	require.ErrorContains(t, err, "max_batch")
	require.Zero(t, b.sub(t, s.ID).Policy.MaxBatch, "unchanged")

	rotated := `{"kind":"rabbitmq","url":"amqp://bob:n3w-pw@127.0.0.1:5672/prod","exchange":"events"}`
	got, err := webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Destination: json.RawMessage(rotated), AllowPrivateTargets: true})
	require.NoError(t, err)
	require.Contains(t, string(got.Destination.Config), "n3w-pw", "stored whole")
	require.NotContains(t, string(webhooks.NewSubscriptionView(got).Destination), "n3w-pw")

	url := "http://127.0.0.1:9/x"
	got, err = webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{URL: &url, AllowPrivateTargets: true})
	require.NoError(t, err)
	require.Equal(t, "http", got.Destination.Kind)
	require.Equal(t, url, got.URL)
	require.JSONEq(t, `{}`, string(got.Destination.Config))
}

// TestUpdate_KeepsAMaskedCredential: a destination sent back with its url
// as the API shows it (password masked) keeps the stored password while
// its other fields change; a masked value that is not what the stored
// destination shows, or a mask on create, is refused naming the field.
func TestUpdate_KeepsAMaskedCredential(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	s, _ := b.subscribe(t, &webhooks.CreateParams{Destination: json.RawMessage(rabbitDest)})

	shown := `{"kind":"rabbitmq","url":"amqp://bob:********@127.0.0.1:5672/prod","exchange":"other"}`
	got, err := webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Destination: json.RawMessage(shown), AllowPrivateTargets: true})
	require.NoError(t, err)
	var stored struct{ URL, Exchange string }
	require.NoError(t, json.Unmarshal(got.Destination.Config, &stored))
	require.Equal(t, "amqp://bob:s3cret-pw@127.0.0.1:5672/prod", stored.URL, "the masked password kept the stored one")
	require.Equal(t, "other", stored.Exchange)

	for _, raw := range []string{
		`{"kind":"rabbitmq","url":"amqp://bob:********@127.0.0.2:5672/prod","exchange":"other"}`, // another host
		`{"kind":"rabbitmq","url":"amqp://eve:********@127.0.0.1:5672/prod","exchange":"other"}`, // another user
		`{"kind":"mqtt","url":"mqtt://bob:********@127.0.0.1:5672","topic":"t"}`,                 // another kind
	} {
		_, err := webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Destination: json.RawMessage(raw), AllowPrivateTargets: true})
		require.ErrorIs(t, err, webhooks.ErrInvalid, raw)
		require.ErrorContains(t, err, "destination.url: ******** stands for the stored credential", raw)
	}
	require.JSONEq(t, string(got.Destination.Config), string(b.sub(t, s.ID).Destination.Config), "unchanged by the refusals")

	_, _, err = webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1",
		Destination: json.RawMessage(shown), AllowPrivateTargets: true})
	require.ErrorIs(t, err, webhooks.ErrInvalid)
	require.ErrorContains(t, err, "destination.url: ******** stands for the stored credential")
}
