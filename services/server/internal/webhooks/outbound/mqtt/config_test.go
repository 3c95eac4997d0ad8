package mqtt_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/mqtt"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsAConfigAndNamesItsAddress", func(t *testing.T) {
		t.Parallel()
		c, err := mqtt.ParseConfig(json.RawMessage(`{"url":"mqtts://app:pw@mqtt.example.com","topic":"bothy/{space}/{type}"}`))
		require.NoError(t, err)
		require.Equal(t, "mqtt.example.com:8883", c.Addr())
	})

	cases := []struct {
		name, raw, field, reason string
	}{
		{"MissingObject", ` `, "destination", "missing"},
		{"UnknownField", `{"url":"mqtt://h","topic":"t","qos":2}`, "destination.qos", "unknown field"},
		{"TopicNotAString", `{"url":"mqtt://h","topic":["t"]}`, "destination.topic", "want a string"},
		{"MissingURL", `{"topic":"t"}`, "destination.url", "missing"},
		{"OtherScheme", `{"url":"ws://u:secretpw@h","topic":"t"}`, "destination.url", "mqtt://"},
		{"URLWithFragment", `{"url":"mqtt://u:secretpw@h#x","topic":"t"}`, "destination.url", "fragment"},
		{"MissingTopic", `{"url":"mqtt://h"}`, "destination.topic", "missing"},
		{"SingleLevelWildcard", `{"url":"mqtt://h","topic":"bothy/+/{type}"}`, "destination.topic", "wildcards"},
		{"MultiLevelWildcard", `{"url":"mqtt://h","topic":"bothy/#"}`, "destination.topic", "wildcards"},
		{"BrokerTopic", `{"url":"mqtt://h","topic":"$SYS/x"}`, "destination.topic", "broker's own"},
		{"StrayBrace", `{"url":"mqtt://h","topic":"bothy/}"}`, "destination.topic", "placeholders"},
	}
	for _, tc := range cases {
		t.Run("Refuses"+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := mqtt.ParseConfig(json.RawMessage(tc.raw))
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

	c, err := mqtt.ParseConfig(json.RawMessage(`{"url":"mqtt://app:s3cret@mqtt.example.com:1884","topic":"bothy/{space}"}`))
	require.NoError(t, err)
	r := c.Redacted()
	require.Equal(t, "mqtt://app:********@mqtt.example.com:1884", r.URL)
	out, err := json.Marshal(r)
	require.NoError(t, err)
	require.NotContains(t, string(out), "s3cret")
	require.JSONEq(t, `{"url":"mqtt://app:********@mqtt.example.com:1884","topic":"bothy/{space}"}`, string(out))
}
