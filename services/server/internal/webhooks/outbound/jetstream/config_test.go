package jetstream_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/jetstream"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsAConfigAndNamesItsAddress", func(t *testing.T) {
		t.Parallel()
		c, err := jetstream.ParseConfig(json.RawMessage(`{"url":"nats://app:pw@nats.example.com","subject":"bothy.{space}.{type}","stream":"EVENTS"}`))
		require.NoError(t, err)
		require.Equal(t, "nats.example.com:4222", c.Addr())
		require.Equal(t, "EVENTS", c.Stream)
	})

	cases := []struct {
		name, raw, field, reason string
	}{
		{"MissingObject", ``, "destination", "missing"},
		{"NotAnObject", `[1]`, "destination", "JSON object"},
		{"UnknownField", `{"url":"nats://h","subject":"a.b","password":"pw"}`, "destination.password", "unknown field"},
		{"SubjectNotAString", `{"url":"nats://h","subject":7}`, "destination.subject", "want a string"},
		{"MissingURL", `{"subject":"a.b"}`, "destination.url", "missing"},
		{"OtherScheme", `{"url":"http://h","subject":"a.b"}`, "destination.url", "nats://"},
		{"URLWithQuery", `{"url":"nats://h?x=1","subject":"a.b"}`, "destination.url", "query"},
		{"URLWithPath", `{"url":"nats://h/x","subject":"a.b"}`, "destination.url", "path"},
		{"BadPort", `{"url":"nats://u:secretpw@h:70000","subject":"a.b"}`, "destination.url", "port"},
		{"MissingSubject", `{"url":"nats://h"}`, "destination.subject", "missing"},
		{"WildcardSubject", `{"url":"nats://h","subject":"bothy.*"}`, "destination.subject", "wildcards"},
		{"TailWildcardSubject", `{"url":"nats://h","subject":"bothy.>"}`, "destination.subject", "wildcards"},
		{"SystemSubject", `{"url":"nats://h","subject":"$JS.API.STREAM.DELETE.X"}`, "destination.subject", "$"},
		{"EmptyToken", `{"url":"nats://h","subject":"bothy..{type}"}`, "destination.subject", "empty token"},
		{"UnknownPlaceholder", `{"url":"nats://h","subject":"bothy.{tenant}"}`, "destination.subject", "placeholders"},
		{"StreamWithDot", `{"url":"nats://h","subject":"a.b","stream":"a.b"}`, "destination.stream", "dots"},
	}
	for _, tc := range cases {
		t.Run("Refuses"+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := jetstream.ParseConfig(json.RawMessage(tc.raw))
			var fe *broker.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			require.Equal(t, tc.field, fe.Field)
			require.Contains(t, fe.Reason, tc.reason)
			require.NotContains(t, err.Error(), "secretpw")
		})
	}
}

func TestConfig_Redacted(t *testing.T) {
	t.Parallel()

	for name, tc := range map[string]struct{ url, want string }{
		"MasksThePassword":    {"nats://app:s3cret@nats.example.com:4222", "nats://app:********@nats.example.com:4222"},
		"MasksAToken":         {"nats://s3cret@nats.example.com", "nats://********@nats.example.com"},
		"LeavesNoCredentials": {"nats://nats.example.com", "nats://nats.example.com"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := jetstream.ParseConfig(json.RawMessage(`{"url":"` + tc.url + `","subject":"a.b"}`))
			require.NoError(t, err)
			r := c.Redacted()
			require.Equal(t, tc.want, r.URL)
			out, err := json.Marshal(r)
			require.NoError(t, err)
			require.NotContains(t, string(out), "s3cret")
			require.Equal(t, tc.url, c.URL, "the original keeps its credentials")
		})
	}
}
