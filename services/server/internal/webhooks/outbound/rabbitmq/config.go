package rabbitmq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// DefaultRoutingKey is the routing key template of a destination that
// sets none.
const DefaultRoutingKey = "{space}.{type}"

// maxName bounds an exchange name and a routing key (AMQP short strings).
const maxName = 255

// Config is a RabbitMQ destination's fields as the API takes them.
type Config struct {
	// URL is amqp:// or amqps://user:password@host:port/vhost; its
	// password is a credential, shown only through Redacted.
	URL string `json:"url"`
	// Exchange is where messages are published; it must exist.
	Exchange string `json:"exchange"`
	// RoutingKey is a template of each message's routing key: {space},
	// {type} and {seq} are the message's first event's. Default
	// DefaultRoutingKey.
	RoutingKey string `json:"routing_key,omitempty"`
}

// ParseConfig reads and checks a destination's fields; an error names the
// field as destination.<name>.
func ParseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("destination: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if c.RoutingKey == "" {
		c.RoutingKey = DefaultRoutingKey
	}
	return c, c.validate()
}

func (c *Config) validate() error {
	if err := checkURL(c.URL); err != nil {
		return fmt.Errorf("destination.url: %w", err)
	}
	switch {
	case c.Exchange == "":
		return errors.New("destination.exchange: required (the default exchange routes by queue name, which a template does not know)")
	case len(c.Exchange) > maxName:
		return fmt.Errorf("destination.exchange: at most %d bytes", maxName)
	case len(c.RoutingKey) > maxName:
		return fmt.Errorf("destination.routing_key: at most %d bytes", maxName)
	}
	if err := checkTemplate(c.RoutingKey); err != nil {
		return fmt.Errorf("destination.routing_key: %w", err)
	}
	return nil
}

// checkURL accepts an AMQP URI without query parameters: those name
// client certificate files on the server's disk, which are not a
// tenant's to choose. Its errors never repeat the URL.
func checkURL(raw string) error {
	if raw == "" {
		return errors.New("required, amqp://user:password@host:port/vhost")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return errors.New("scheme must be amqp or amqps")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return errors.New("query parameters and fragments are not accepted")
	}
	if u.Hostname() == "" {
		return errors.New("host required")
	}
	if _, err := amqp.ParseURI(raw); err != nil {
		return errors.New("not an AMQP URI")
	}
	return nil
}

// placeholders are what a routing key template may name.
var placeholders = []string{"{space}", "{type}", "{seq}"}

// checkTemplate refuses a brace that opens no known placeholder.
func checkTemplate(t string) error {
	rest := t
	for {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			return nil
		}
		ok := false
		for _, p := range placeholders {
			if strings.HasPrefix(rest[i:], p) {
				rest, ok = rest[i+len(p):], true
				break
			}
		}
		if !ok {
			return errors.New("only {space}, {type} and {seq} may appear in braces")
		}
	}
}

// key is m's routing key.
func (c *Config) key(m *outbound.Message) string {
	return strings.NewReplacer("{space}", m.Space, "{type}", m.Type, "{seq}", strconv.FormatInt(m.Seq, 10)).Replace(c.RoutingKey)
}

// Redacted returns c with the URL's password masked.
func (c Config) Redacted() Config {
	u, err := url.Parse(c.URL)
	if err != nil {
		c.URL = ""
		return c
	}
	_, set := u.User.Password()
	if !set {
		c.URL = u.String()
		return c
	}
	user := url.User(u.User.Username()) // the mask unescaped: url would write * as %2A
	u.User = user
	c.URL = strings.Replace(u.String(), "//"+user.String()+"@", "//"+user.String()+":"+outbound.Masked+"@", 1)
	return c
}

// Addr is the broker's host:port.
func (c Config) Addr() string {
	u, err := amqp.ParseURI(c.URL)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(u.Host, strconv.Itoa(u.Port))
}
