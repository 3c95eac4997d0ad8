package jetstream

import (
	"encoding/json"
	"strings"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// Config is a NATS JetStream destination as its JSON carries it.
type Config struct {
	// URL is the server's nats:// or tls:// URL (port 4222 by default).
	// Credentials travel in it: user:password@, or a token as the user.
	URL string `json:"url"`
	// Subject is the subject a message is published on; {space} and
	// {type} stand for its first event's space and type, as in
	// "bothy.{space}.{type}". A stream must take the subject.
	Subject string `json:"subject"`
	// Stream, when set, is the stream the message must land in: one the
	// subject would take to another stream is refused (Retry) rather than
	// stored there. Default "": whichever stream takes the subject.
	Stream string `json:"stream,omitempty"`

	url     broker.URL
	subject broker.Template
}

var schemes = []broker.Scheme{{Name: "nats", DefaultPort: 4222}, {Name: "tls", DefaultPort: 4222, TLS: true}}

// ParseConfig reads and checks a destination's JSON. Its errors are
// *broker.FieldError naming the field ("destination.subject: ...").
func ParseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if err := broker.Decode(raw, &c); err != nil {
		return Config{}, err
	}
	var err error
	if c.url, err = broker.ParseURL(c.URL, schemes, nil); err != nil {
		return Config{}, err
	}
	if c.subject, err = broker.ParseTemplate("subject", c.Subject, subjectProblem); err != nil {
		return Config{}, err
	}
	if c.Stream != "" {
		if why := streamNameProblem(c.Stream); why != "" {
			return Config{}, broker.Fieldf("stream", "%s", why)
		}
	}
	return c, nil
}

// Redacted is c with the URL's credentials masked.
func (c Config) Redacted() Config {
	c.URL = broker.RedactURL(c.URL, true)
	c.url = broker.URL{}
	return c
}

// Addr is the server's host:port, for the egress check; "" for a Config
// that ParseConfig did not return.
func (c Config) Addr() string { return c.url.Addr }

// subjectProblem says why s is not a subject to publish on, or "": tokens
// separated by dots, none empty, no whitespace, no wildcard (* or >), and
// not a system subject ($JS, $SYS and every $ prefix, _INBOX), which would
// call the server's API instead of storing a message.
func subjectProblem(s string) string {
	switch {
	case strings.HasPrefix(s, "$"):
		return "subjects starting with $ are the server's API"
	case strings.HasPrefix(s, "_INBOX."):
		return "_INBOX subjects are for replies"
	case strings.ContainsAny(s, " \t\r\n\f\v"):
		return "whitespace is not allowed in a subject"
	}
	for _, tok := range strings.Split(s, ".") {
		switch tok {
		case "":
			return "empty token (a leading, trailing or doubled dot)"
		case "*", ">":
			return "wildcards are for subscribing, not publishing"
		}
	}
	return ""
}

// streamNameProblem says why s is not a JetStream stream name, or "".
func streamNameProblem(s string) string {
	if len(s) > 255 {
		return "at most 255 bytes"
	}
	if strings.ContainsAny(s, " \t\r\n.*>/\\") {
		return "a stream name has no whitespace, dots, wildcards or slashes"
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return "control characters are not allowed"
		}
	}
	return ""
}
