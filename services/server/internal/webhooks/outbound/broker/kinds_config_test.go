package broker_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// TestKinds_ParseConfig: each broker kind accepts its fields and names
// the address, and refuses bad fields with a *broker.FieldError naming
// the field, never repeating the URL's password.
func TestKinds_ParseConfig(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct{ kind, name, raw, addr string }{
		{"jetstream", "Stream", `{"url":"nats://app:pw@nats.example.com","subject":"bothy.{space}.{type}","stream":"EVENTS"}`, "nats.example.com:4222"},
		{"redis", "DatabaseAndMaxLen", `{"url":"rediss://:pw@redis.example.com/2","key":"bothy:{space}","maxlen":1000}`, "redis.example.com:6379"},
		{"mqtt", "TLS", `{"url":"mqtts://app:pw@mqtt.example.com","topic":"bothy/{space}/{type}"}`, "mqtt.example.com:8883"},
	} {
		t.Run(tc.kind+"/Accepts"+tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := kindParsers[tc.kind](json.RawMessage(tc.raw))
			require.NoError(t, err)
			require.Equal(t, tc.addr, c.addr)
		})
	}

	for _, tc := range []struct{ kind, name, raw, field, reason string }{
		{"jetstream", "MissingObject", ``, "destination", "missing"},
		{"jetstream", "NotAnObject", `[1]`, "destination", "JSON object"},
		{"jetstream", "UnknownField", `{"url":"nats://h","subject":"a.b","password":"pw"}`, "destination.password", "unknown field"},
		{"jetstream", "SubjectNotAString", `{"url":"nats://h","subject":7}`, "destination.subject", "want a string"},
		{"jetstream", "MissingURL", `{"subject":"a.b"}`, "destination.url", "missing"},
		{"jetstream", "OtherScheme", `{"url":"http://h","subject":"a.b"}`, "destination.url", "nats://"},
		{"jetstream", "URLWithQuery", `{"url":"nats://h?x=1","subject":"a.b"}`, "destination.url", "query"},
		{"jetstream", "URLWithPath", `{"url":"nats://h/x","subject":"a.b"}`, "destination.url", "path"},
		{"jetstream", "BadPort", `{"url":"nats://u:secretpw@h:70000","subject":"a.b"}`, "destination.url", "port"},
		{"jetstream", "MissingSubject", `{"url":"nats://h"}`, "destination.subject", "missing"},
		{"jetstream", "WildcardSubject", `{"url":"nats://h","subject":"bothy.*"}`, "destination.subject", "wildcards"},
		{"jetstream", "TailWildcardSubject", `{"url":"nats://h","subject":"bothy.>"}`, "destination.subject", "wildcards"},
		{"jetstream", "SystemSubject", `{"url":"nats://h","subject":"$JS.API.STREAM.DELETE.X"}`, "destination.subject", "$"},
		{"jetstream", "EmptyToken", `{"url":"nats://h","subject":"bothy..{type}"}`, "destination.subject", "empty token"},
		{"jetstream", "UnknownPlaceholder", `{"url":"nats://h","subject":"bothy.{tenant}"}`, "destination.subject", "placeholders"},
		{"jetstream", "StreamWithDot", `{"url":"nats://h","subject":"a.b","stream":"a.b"}`, "destination.stream", "dots"},
		{"redis", "MissingObject", `null`, "destination", "missing"},
		{"redis", "UnknownField", `{"url":"redis://h","key":"k","db":2}`, "destination.db", "unknown field"},
		{"redis", "MaxLenNotANumber", `{"url":"redis://h","key":"k","maxlen":"10"}`, "destination.maxlen", "want an integer"},
		{"redis", "NegativeMaxLen", `{"url":"redis://h","key":"k","maxlen":-1}`, "destination.maxlen", "want 0"},
		{"redis", "MissingURL", `{"key":"k"}`, "destination.url", "missing"},
		{"redis", "OtherScheme", `{"url":"nats://h","key":"k"}`, "destination.url", "redis://"},
		{"redis", "NotADatabase", `{"url":"redis://u:secretpw@h/db","key":"k"}`, "destination.url", "path"},
		{"redis", "URLWithQuery", `{"url":"redis://u:secretpw@h?password=x","key":"k"}`, "destination.url", "query"},
		{"redis", "MissingKey", `{"url":"redis://h"}`, "destination.key", "missing"},
		{"redis", "UnclosedPlaceholder", `{"url":"redis://h","key":"bothy:{space"}`, "destination.key", "placeholders"},
		{"redis", "ControlCharacter", `{"url":"redis://h","key":"a\nb"}`, "destination.key", "control"},
		{"mqtt", "MissingObject", ` `, "destination", "missing"},
		{"mqtt", "UnknownField", `{"url":"mqtt://h","topic":"t","qos":2}`, "destination.qos", "unknown field"},
		{"mqtt", "TopicNotAString", `{"url":"mqtt://h","topic":["t"]}`, "destination.topic", "want a string"},
		{"mqtt", "MissingURL", `{"topic":"t"}`, "destination.url", "missing"},
		{"mqtt", "OtherScheme", `{"url":"ws://u:secretpw@h","topic":"t"}`, "destination.url", "mqtt://"},
		{"mqtt", "URLWithFragment", `{"url":"mqtt://u:secretpw@h#x","topic":"t"}`, "destination.url", "fragment"},
		{"mqtt", "MissingTopic", `{"url":"mqtt://h"}`, "destination.topic", "missing"},
		{"mqtt", "SingleLevelWildcard", `{"url":"mqtt://h","topic":"bothy/+/{type}"}`, "destination.topic", "wildcards"},
		{"mqtt", "MultiLevelWildcard", `{"url":"mqtt://h","topic":"bothy/#"}`, "destination.topic", "wildcards"},
		{"mqtt", "BrokerTopic", `{"url":"mqtt://h","topic":"$SYS/x"}`, "destination.topic", "broker's own"},
		{"mqtt", "StrayBrace", `{"url":"mqtt://h","topic":"bothy/}"}`, "destination.topic", "placeholders"},
	} {
		t.Run(tc.kind+"/Refuses"+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := kindParsers[tc.kind](json.RawMessage(tc.raw))
			var fe *broker.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			require.Equal(t, tc.field, fe.Field)
			require.Contains(t, fe.Reason, tc.reason)
			require.NotContains(t, err.Error(), "secretpw")
		})
	}
}

// TestKinds_ConfigRedacted: each broker kind shows its fields with the
// URL's password (and a NATS token) masked.
func TestKinds_ConfigRedacted(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct{ kind, name, fields, want string }{
		{"jetstream", "MasksThePassword", `"url":"nats://app:s3cret@nats.example.com:4222","subject":"a.b"`, "nats://app:********@nats.example.com:4222"},
		{"jetstream", "MasksAToken", `"url":"nats://s3cret@nats.example.com","subject":"a.b"`, "nats://********@nats.example.com"},
		{"jetstream", "LeavesNoCredentials", `"url":"nats://nats.example.com","subject":"a.b"`, "nats://nats.example.com"},
		{"redis", "MasksThePassword", `"url":"redis://app:s3cret@redis.example.com:6380/1","key":"k"`, "redis://app:********@redis.example.com:6380/1"},
		{"redis", "MasksAPasswordAlone", `"url":"rediss://:s3cret@redis.example.com","key":"k"`, "rediss://:********@redis.example.com"},
		{"redis", "KeepsAUserWithoutSecret", `"url":"redis://app@redis.example.com","key":"k"`, "redis://app@redis.example.com"},
		{"mqtt", "MasksThePassword", `"url":"mqtt://app:s3cret@mqtt.example.com:1884","topic":"bothy/{space}"`, "mqtt://app:********@mqtt.example.com:1884"},
	} {
		t.Run(tc.kind+"/"+tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := kindParsers[tc.kind](json.RawMessage("{" + tc.fields + "}"))
			require.NoError(t, err)
			var shown struct {
				URL string `json:"url"`
			}
			require.NoError(t, json.Unmarshal(c.redacted, &shown))
			require.Equal(t, tc.want, shown.URL)
			require.NotContains(t, string(c.redacted), "s3cret")
		})
	}
}
