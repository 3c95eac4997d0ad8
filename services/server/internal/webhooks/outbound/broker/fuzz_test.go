package broker_test

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/jetstream"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/mqtt"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/redisstream"
)

// checked is what a kind's ParseConfig made of a destination's fields.
type checked struct {
	redacted []byte
	addr     string
}

// kindParsers parse a destination's fields as each broker kind does.
var kindParsers = map[string]func(json.RawMessage) (checked, error){
	"jetstream": func(raw json.RawMessage) (checked, error) {
		c, err := jetstream.ParseConfig(raw)
		r, _ := json.Marshal(c.Redacted())
		return checked{r, c.Addr()}, err
	},
	"redis": func(raw json.RawMessage) (checked, error) {
		c, err := redisstream.ParseConfig(raw)
		r, _ := json.Marshal(c.Redacted())
		return checked{r, c.Addr()}, err
	},
	"mqtt": func(raw json.RawMessage) (checked, error) {
		c, err := mqtt.ParseConfig(raw)
		r, _ := json.Marshal(c.Redacted())
		return checked{r, c.Addr()}, err
	},
}

// FuzzParseConfig: whatever a tenant sends as a broker destination's
// fields, each kind answers a *broker.FieldError naming a destination
// field, or a configuration with an address; and neither the error nor
// the redacted configuration carries the URL's password.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"url":"nats://u:longsecret1@h:4222","subject":"bothy.{space}.{type}","stream":"S"}`,
		`{"url":"redis://:longsecret1@h/3","key":"bothy:{space}","maxlen":100}`,
		`{"url":"mqtt://u:longsecret1@h","topic":"bothy/{space}/{type}"}`,
		`{"url":"nats://longsecret1@h","subject":"a.{x}"}`,
		`{"url":"redis://u:longsecret1@h:99999","key":"k"}`,
		`{"url":7}`, `null`, `[]`, `{"url":"mqtt://u:longsecret1@h","topic":"a/#"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		password := urlPassword(raw)
		for kind, parse := range kindParsers {
			c, err := parse(json.RawMessage(raw))
			if err != nil {
				var fe *broker.FieldError
				if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "destination") {
					t.Fatalf("%s: error %v is not a field error", kind, err)
				}
				if password != "" && strings.Contains(err.Error(), password) {
					t.Fatalf("%s: error %q carries the password", kind, err)
				}
				continue
			}
			if c.addr == "" {
				t.Fatalf("%s: accepted without an address", kind)
			}
			if password != "" && strings.Contains(string(c.redacted), password) {
				t.Fatalf("%s: redacted %s carries the password", kind, c.redacted)
			}
		}
	})
}

// urlPassword is the password of the url field of raw, when there is one
// long and distinct enough to look for in a text (a one-letter password
// is found in any text).
func urlPassword(raw []byte) string {
	var f struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(raw, &f) != nil {
		return ""
	}
	u, err := url.Parse(f.URL)
	if err != nil || u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	if len(p) < 8 || strings.Contains(strings.Replace(f.URL, p, "", 1), p) || strings.Contains(broker.Masked, p) {
		return ""
	}
	return p
}
