package mqtt

import (
	"encoding/json"
	"strings"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// Config is an MQTT destination as its JSON carries it.
type Config struct {
	// URL is the broker's mqtt:// or mqtts:// (TLS) URL, port 1883 or
	// 8883 by default. Credentials travel in it: user:password@.
	URL string `json:"url"`
	// Topic is the topic a message is published to; {space} and {type}
	// stand for its first event's space and type, as in
	// "bothy/{space}/{type}".
	Topic string `json:"topic"`

	url   broker.URL
	topic broker.Template
}

var schemes = []broker.Scheme{{Name: "mqtt", DefaultPort: 1883}, {Name: "mqtts", DefaultPort: 8883, TLS: true}}

// ParseConfig reads and checks a destination's JSON. Its errors are
// *broker.FieldError naming the field ("destination.topic: ...").
func ParseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if err := broker.Decode(raw, &c); err != nil {
		return Config{}, err
	}
	var err error
	if c.url, err = broker.ParseURL(c.URL, schemes, nil); err != nil {
		return Config{}, err
	}
	if c.topic, err = broker.ParseTemplate("topic", c.Topic, topicProblem); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Redacted is c with the URL's password masked.
func (c Config) Redacted() Config {
	c.URL = broker.RedactURL(c.URL, false)
	c.url = broker.URL{}
	return c
}

// Addr is the broker's host:port, for the egress check; "" for a Config
// that ParseConfig did not return.
func (c Config) Addr() string { return c.url.Addr }

// topicProblem says why t is not a topic to publish to, or "": no
// wildcard (+ or #) and not a broker's own topic ($SYS and every $
// prefix); ParseTemplate refuses control characters, NUL among them. Spaces and types hold none of these, so a topic the template
// passes with is one every message passes with.
func topicProblem(t string) string {
	switch {
	case strings.ContainsAny(t, "+#"):
		return "wildcards (+ and #) are for subscribing, not publishing"
	case strings.HasPrefix(t, "$"):
		return "topics starting with $ are the broker's own"
	}
	return ""
}
