package broker_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

func TestParseTemplate(t *testing.T) {
	t.Parallel()

	t.Run("RendersSpaceAndType", func(t *testing.T) {
		t.Parallel()
		tp, err := broker.ParseTemplate("subject", "bothy.{space}.{type}.{space}", nil)
		require.NoError(t, err)
		require.Equal(t, "bothy.acme.order.created.acme", tp.Render("acme", "order.created"))
	})

	t.Run("RendersALiteral", func(t *testing.T) {
		t.Parallel()
		tp, err := broker.ParseTemplate("key", "events", nil)
		require.NoError(t, err)
		require.Equal(t, "events", tp.Render("acme", "order.created"))
	})

	t.Run("AsksTheBrokerAboutASample", func(t *testing.T) {
		t.Parallel()
		var seen string
		_, err := broker.ParseTemplate("topic", "a/{space}/{type}", func(s string) string { seen = s; return "no good" })
		require.Equal(t, "a/space/type", seen)
		require.EqualError(t, err, "destination.topic: no good")
	})

	for name, raw := range map[string]string{
		"Empty":              "",
		"TooLong":            string(make([]byte, broker.MaxTemplateLength+1)),
		"NotUTF8":            "a\xffb",
		"ControlCharacter":   "a\tb",
		"UnknownPlaceholder": "a.{seq}",
		"UnclosedBrace":      "a.{space",
		"StrayClosingBrace":  "a.}",
	} {
		t.Run("Refuses"+name, func(t *testing.T) {
			t.Parallel()
			_, err := broker.ParseTemplate("subject", raw, nil)
			var fe *broker.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			require.Equal(t, "destination.subject", fe.Field)
		})
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	schemes := []broker.Scheme{{Name: "x", DefaultPort: 1000}, {Name: "xs", DefaultPort: 1001, TLS: true}}

	t.Run("FillsTheDefaultPort", func(t *testing.T) {
		t.Parallel()
		u, err := broker.ParseURL("XS://user:pw@[2001:db8::1]", schemes, nil)
		require.NoError(t, err)
		require.Equal(t, "[2001:db8::1]:1001", u.Addr)
		require.True(t, u.TLS)
		require.Equal(t, "user", u.Username())
		require.Equal(t, "pw", u.Password())
	})

	for name, raw := range map[string]string{
		"Missing":     "",
		"OtherScheme": "y://h",
		"NoHost":      "x:///",
		"Opaque":      "x:h",
		"Query":       "x://h?a=b",
		"Fragment":    "x://h#f",
		"Path":        "x://h/p",
		"PortZero":    "x://h:0",
		"TooLong":     "x://h/" + string(make([]byte, broker.MaxURLLength)),
	} {
		t.Run("Refuses"+name, func(t *testing.T) {
			t.Parallel()
			_, err := broker.ParseURL(raw, schemes, nil)
			var fe *broker.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			require.Equal(t, "destination.url", fe.Field)
		})
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()

	for name, tc := range map[string]struct {
		raw          string
		userIsSecret bool
		want         string
	}{
		"Password":           {"x://u:p%40ss@h:1/0", false, "x://u:********@h:1/0"},
		"UserIsSecret":       {"x://tok@h", true, "x://********@h"},
		"UserAndPassword":    {"x://u:p@h", true, "x://u:********@h"},
		"UserIsNotSecret":    {"x://u@h", false, "x://u@h"},
		"NoCredentials":      {"x://h", true, "x://h"},
		"UnparsableIsMasked": {"x://u:p@h:%zz", false, "********"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, broker.RedactURL(tc.raw, tc.userIsSecret))
		})
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	type config struct {
		A string `json:"a"`
		N int    `json:"n"`
	}

	for name, tc := range map[string]struct{ raw, want string }{
		"Null":        {`null`, "destination: missing: want a JSON object"},
		"Unknown":     {`{"a":"x","b":1}`, "destination.b: unknown field"},
		"WrongType":   {`{"n":"secret-value"}`, "destination.n: want an integer, not string"},
		"Trailing":    {`{"a":"x"} {}`, "destination: want one JSON object, found more after it"},
		"Broken":      {`{"a":"secret-value`, "destination: not a JSON object"},
		"NotAnObject": {`"secret-value"`, "destination: want a JSON object, not string"},
	} {
		t.Run("Refuses"+name, func(t *testing.T) {
			t.Parallel()
			var c config
			err := broker.Decode(json.RawMessage(tc.raw), &c)
			require.EqualError(t, err, tc.want)
			require.NotContains(t, err.Error(), "secret-value")
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	for attempt, want := range map[int]time.Duration{1: 250 * time.Millisecond, 2: 500 * time.Millisecond, 3: time.Second, 10: 15 * time.Second, 100: 15 * time.Second} {
		got := broker.Backoff(attempt)
		require.LessOrEqual(t, got, want, "attempt %d", attempt)
		require.GreaterOrEqual(t, got, want-want/5, "attempt %d", attempt)
	}
}
