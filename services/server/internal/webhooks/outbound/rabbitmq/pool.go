// Package rabbitmq is the RabbitMQ destination: each message is published
// persistent and mandatory to the destination's exchange under a routing
// key made from its template, on a channel in confirm mode, and is
// Delivered only once the broker acks it. A return (no queue bound for the
// key), a nack, a closed channel (a missing exchange) or a cut connection
// is a Retry with the broker's reason; so is a broker that cannot be
// reached, which the pool dials again with backoff. The message id is the
// message's id (the event's) and its headers are outbound.Signed's, so a
// consumer verifies it as a webhook.
package rabbitmq

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	gosync "sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// Backoff bounds between dials of a broker that could not be reached.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// dialTimeout bounds a dial and the AMQP handshake.
const dialTimeout = 10 * time.Second

// idleChannels is how many confirm-mode channels a connection keeps open
// for the next sends.
const idleChannels = 64

// Pool holds one connection per broker URL (address, credentials and
// vhost) for the process, opened at its first send, and dials again with
// backoff once it is lost. It is safe for concurrent use.
type Pool struct {
	policy egress.Policy
	log    *slog.Logger
	mu     gosync.Mutex
	conns  map[string]*conn
	closed bool
	// noConfirm publishes without waiting for the broker's ack: for the
	// test that shows the conformance suite fails without confirms.
	noConfirm bool
}

// NewPool returns a pool that dials through p.Control.
func NewPool(p egress.Policy, log *slog.Logger) *Pool {
	if log == nil {
		log = slog.Default()
	}
	return &Pool{policy: p, log: log, conns: map[string]*conn{}}
}

// Destination returns the destination of c for target t (its secrets and
// headers sign each message).
func (p *Pool) Destination(c Config, t *outbound.Target) outbound.Destination {
	return &destination{cfg: c, target: t, conn: p.conn(c.URL)}
}

// Close closes every connection; sends after it are Retry.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	conns := make([]*conn, 0, len(p.conns))
	for _, c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// conn returns the connection entry of url, made on first use.
func (p *Pool) conn(url string) *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.conns[url]
	if !ok {
		c = &conn{pool: p, url: url, idle: make(chan *channel, idleChannels)}
		p.conns[url] = c
	}
	return c
}

// conn is one broker connection and its idle channels.
type conn struct {
	pool *Pool
	url  string
	idle chan *channel

	mu      gosync.Mutex
	amqp    *amqp.Connection
	lastErr error
	retryAt time.Time
	backoff time.Duration
}

// open returns the live connection, dialling it unless the last dial
// failed less than the backoff ago.
func (c *conn) open() (*amqp.Connection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.amqp != nil && !c.amqp.IsClosed() {
		return c.amqp, nil
	}
	if c.pool.isClosed() {
		return nil, errors.New("the destination pool is closed")
	}
	if time.Now().Before(c.retryAt) {
		return nil, fmt.Errorf("broker unreachable, dialling again in %s: %w", time.Until(c.retryAt).Round(time.Millisecond), c.lastErr)
	}
	ac, err := c.dial()
	if err != nil {
		c.backoff = min(max(2*c.backoff, minBackoff), maxBackoff)
		c.lastErr, c.retryAt = err, time.Now().Add(c.backoff)
		c.pool.log.Warn("rabbitmq destination: dial failed", slog.String("addr", Config{URL: c.url}.Addr()),
			slog.String("error", err.Error()), slog.Duration("retry_in", c.backoff))
		return nil, err
	}
	c.amqp, c.backoff, c.lastErr = ac, 0, nil
	return ac, nil
}

// dial connects through the egress policy; TLS for amqps names the host.
func (c *conn) dial() (*amqp.Connection, error) {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second, Control: c.pool.policy.Control}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("bothy webhooks")
	cfg := amqp.Config{Heartbeat: 10 * time.Second, Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			nc, err := d.Dial(network, addr)
			if err != nil {
				return nil, fmt.Errorf("%w%s", err, outbound.PrivateHint(err))
			}
			return nc, nc.SetDeadline(time.Now().Add(dialTimeout)) // cleared once AMQP is open
		}}
	if u, err := url.Parse(c.url); err == nil && u.Scheme == "amqps" {
		cfg.TLSClientConfig = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	}
	ac, err := amqp.DialConfig(c.url, cfg)
	if err != nil {
		return nil, fmt.Errorf("dial: %s", scrub(err, c.url))
	}
	return ac, nil
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
	ac, err := c.open()
	if err != nil {
		return nil, err
	}
	raw, err := ac.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if !c.pool.noConfirm {
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

// close closes the connection (and with it its channels).
func (c *conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.amqp != nil {
		_ = c.amqp.Close()
		c.amqp = nil
	}
}

func (p *Pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
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
