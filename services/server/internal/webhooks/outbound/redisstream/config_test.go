package redisstream_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/redisstream"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsAConfigAndNamesItsAddress", func(t *testing.T) {
		t.Parallel()
		c, err := redisstream.ParseConfig(json.RawMessage(`{"url":"rediss://:pw@redis.example.com/2","key":"bothy:{space}","maxlen":1000}`))
		require.NoError(t, err)
		require.Equal(t, "redis.example.com:6379", c.Addr())
		require.EqualValues(t, 1000, c.MaxLen)
	})

	cases := []struct {
		name, raw, field, reason string
	}{
		{"MissingObject", `null`, "destination", "missing"},
		{"UnknownField", `{"url":"redis://h","key":"k","db":2}`, "destination.db", "unknown field"},
		{"MaxLenNotANumber", `{"url":"redis://h","key":"k","maxlen":"10"}`, "destination.maxlen", "want an integer"},
		{"NegativeMaxLen", `{"url":"redis://h","key":"k","maxlen":-1}`, "destination.maxlen", "want 0"},
		{"MissingURL", `{"key":"k"}`, "destination.url", "missing"},
		{"OtherScheme", `{"url":"nats://h","key":"k"}`, "destination.url", "redis://"},
		{"NotADatabase", `{"url":"redis://u:secretpw@h/db","key":"k"}`, "destination.url", "path"},
		{"URLWithQuery", `{"url":"redis://u:secretpw@h?password=x","key":"k"}`, "destination.url", "query"},
		{"MissingKey", `{"url":"redis://h"}`, "destination.key", "missing"},
		{"UnclosedPlaceholder", `{"url":"redis://h","key":"bothy:{space"}`, "destination.key", "placeholders"},
		{"ControlCharacter", `{"url":"redis://h","key":"a\nb"}`, "destination.key", "control"},
	}
	for _, tc := range cases {
		t.Run("Refuses"+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := redisstream.ParseConfig(json.RawMessage(tc.raw))
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
		"MasksThePassword":        {"redis://app:s3cret@redis.example.com:6380/1", "redis://app:********@redis.example.com:6380/1"},
		"MasksAPasswordAlone":     {"rediss://:s3cret@redis.example.com", "rediss://:********@redis.example.com"},
		"KeepsAUserWithoutSecret": {"redis://app@redis.example.com", "redis://app@redis.example.com"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := redisstream.ParseConfig(json.RawMessage(`{"url":"` + tc.url + `","key":"k"}`))
			require.NoError(t, err)
			r := c.Redacted()
			require.Equal(t, tc.want, r.URL)
			out, err := json.Marshal(r)
			require.NoError(t, err)
			require.NotContains(t, string(out), "s3cret")
		})
	}
}
