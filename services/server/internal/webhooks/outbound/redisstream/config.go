package redisstream

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// MaxMaxLen bounds the maxlen field.
const MaxMaxLen = 1 << 40

// Config is a Redis Streams destination as its JSON carries it.
type Config struct {
	// URL is the server's redis:// or rediss:// (TLS) URL, port 6379 by
	// default, with an optional database number as its path ("/2").
	// Credentials travel in it: user:password@, or :password@.
	URL string `json:"url"`
	// Key is the stream key a message is added to; {space} and {type}
	// stand for its first event's space and type, as in "bothy:{space}".
	// A key takes one subscription's messages and no other writer's: its
	// entry ids are the subscription's seqs (see the package doc).
	Key string `json:"key"`
	// MaxLen, when above 0, trims the stream to about that many entries
	// as each is added (XADD MAXLEN ~). Default 0: no trimming.
	MaxLen int64 `json:"maxlen,omitempty"`

	url broker.URL
	key broker.Template
}

var schemes = []broker.Scheme{{Name: "redis", DefaultPort: 6379}, {Name: "rediss", DefaultPort: 6379, TLS: true}}

// ParseConfig reads and checks a destination's JSON. Its errors are
// *broker.FieldError naming the field ("destination.key: ...").
func ParseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if err := broker.Decode(raw, &c); err != nil {
		return Config{}, err
	}
	var err error
	if c.url, err = broker.ParseURL(c.URL, schemes, databasePath); err != nil {
		return Config{}, err
	}
	if c.key, err = broker.ParseTemplate("key", c.Key, nil); err != nil {
		return Config{}, err
	}
	if c.MaxLen < 0 || c.MaxLen > MaxMaxLen {
		return Config{}, broker.Fieldf("maxlen", "%d: want 0 (no trimming) to %d", c.MaxLen, int64(MaxMaxLen))
	}
	return c, nil
}

// databasePath accepts "/N", a database number.
func databasePath(p string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(p, "/"))
	return err == nil && n >= 0 && n < 1<<16
}

// Redacted is c with the URL's password masked.
func (c Config) Redacted() Config {
	c.URL = broker.RedactURL(c.URL, false)
	c.url = broker.URL{}
	return c
}

// Addr is the server's host:port, for the egress check; "" for a Config
// that ParseConfig did not return.
func (c Config) Addr() string { return c.url.Addr }

// database is the URL's database number, 0 by default.
func (c Config) database() int {
	u := c.url.URL()
	if u == nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(u.Path, "/"))
	return n
}
