package rabbitmq

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// idleChannels is how many confirm-mode channels a connection keeps open
// for the next sends.
const idleChannels = 64

// Pool holds one connection per broker URL (address, credentials and
// vhost) for the process, in a broker.Pool: opened at its first send,
// dialled again after a loss (with broker.Backoff between failed dials),
// closed once unused for broker.IdleTTL or at Close. It is safe for
// concurrent use.
type Pool struct {
	policy egress.Policy
	conns  *broker.Pool[*conn]
	// channels is how many idle channels a connection keeps.
	channels int
	// noConfirm publishes without waiting for the broker's ack: for the
	// test that shows the conformance suite fails without confirms.
	noConfirm bool
}

// NewPool returns a pool that dials through p.Control.
func NewPool(p egress.Policy, log *slog.Logger) *Pool {
	return &Pool{policy: p, conns: broker.NewPool[*conn]("rabbitmq", log), channels: idleChannels}
}

// Destination returns the destination of c for target t (its secrets and
// headers sign each message).
func (p *Pool) Destination(c Config, t *outbound.Target) outbound.Destination {
	return &destination{cfg: c, target: t, pool: p, key: broker.Key{ID: c.URL, Addr: c.Addr()}}
}

// Close closes every connection; sends after it are Retry.
func (p *Pool) Close() { p.conns.Close() }

// conn is one broker connection and its idle channels.
type conn struct {
	amqp      *amqp.Connection
	idle      chan *channel
	noConfirm bool
}

func (c *conn) Broken() bool { return c.amqp.IsClosed() }
func (c *conn) Close()       { _ = c.amqp.Close() }

// dial connects to rawURL through the egress policy; TLS for amqps names
// the host.
func (p *Pool) dial(rawURL string) broker.Dial[*conn] {
	return func(context.Context) (*conn, error) {
		d := broker.NewDialer(p.policy)
		props := amqp.NewConnectionProperties()
		props.SetClientConnectionName("bothy webhooks")
		cfg := amqp.Config{Heartbeat: 10 * time.Second, Properties: props,
			Dial: func(network, addr string) (net.Conn, error) {
				nc, err := d.Dial(network, addr)
				if err != nil {
					return nil, err
				}
				return nc, nc.SetDeadline(time.Now().Add(broker.DialTimeout)) // cleared once AMQP is open
			}}
		if u, err := url.Parse(rawURL); err == nil && u.Scheme == "amqps" {
			cfg.TLSClientConfig = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
		}
		ac, err := amqp.DialConfig(rawURL, cfg)
		if err != nil {
			return nil, fmt.Errorf("dial: %s", scrub(err, rawURL))
		}
		return &conn{amqp: ac, idle: make(chan *channel, p.channels), noConfirm: p.noConfirm}, nil
	}
}

// channel returns an idle channel, or a new one in confirm mode.
func (c *conn) channel() (*channel, error) {
	for {
		select {
		case ch := <-c.idle:
			if !ch.ch.IsClosed() {
				return ch, nil
			}
		default:
			return c.newChannel()
		}
	}
}

// newChannel opens a channel, in confirm mode unless the pool skips
// confirms.
func (c *conn) newChannel() (*channel, error) {
	raw, err := c.amqp.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if !c.noConfirm {
		if err := raw.Confirm(false); err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("confirm mode: %w", err)
		}
	}
	return &channel{ch: raw, returns: raw.NotifyReturn(make(chan amqp.Return, 1)),
		closes: raw.NotifyClose(make(chan *amqp.Error, 1))}, nil
}

// put keeps ch for the next send, or closes it when enough are idle.
func (c *conn) put(ch *channel) {
	select {
	case c.idle <- ch:
	default:
		_ = ch.ch.Close()
	}
}

// scrub returns err's text without the URL, which carries the password.
func scrub(err error, rawURL string) string {
	s := err.Error()
	if u, perr := url.Parse(rawURL); perr == nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			s = strings.ReplaceAll(s, pw, outbound.Masked)
		}
	}
	return s
}
