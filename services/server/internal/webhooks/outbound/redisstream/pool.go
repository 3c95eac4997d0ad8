package redisstream

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	gosync "sync"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// Pool keeps one client per server URL (address, credentials and
// database) for the whole process, in a broker.Pool: made when a
// destination first needs it, once Redis answered its PING (with
// broker.Backoff between failed tries), closed once unused for
// broker.IdleTTL or at Close. A client holds a few connections and
// replaces a broken one by itself, dialling when a command needs one;
// after a run of failed dials it answers at once with the last dial error
// while it probes the server once a second in the background. It is safe
// for concurrent use.
type Pool struct {
	policy egress.Policy
	conns  *broker.Pool[*conn]
	// noConfirm adds entries without waiting for Redis' answer: only for
	// the test that shows the conformance suite fails without it.
	noConfirm bool
}

// NewPool returns a pool whose clients dial through p. The client
// library's own reports (failed dials, with addresses and no credentials)
// go to the first pool's log at Warn rather than to stderr: the library
// has one logger per process.
func NewPool(p egress.Policy, log *slog.Logger) *Pool {
	if log == nil {
		log = slog.Default()
	}
	libraryLog.Do(func() { redis.SetLogger(slogPrinter{log}) })
	return &Pool{policy: p, conns: broker.NewPool[*conn]("redis", log)}
}

var libraryLog gosync.Once

// slogPrinter passes the client library's reports to a slog.Logger.
type slogPrinter struct{ log *slog.Logger }

func (s slogPrinter) Printf(ctx context.Context, format string, v ...any) {
	s.log.WarnContext(ctx, "redis client", slog.String("report", fmt.Sprintf(format, v...)))
}

// conn is one server's client.
type conn struct{ client *redis.Client }

// Broken is false: the client replaces its broken connections itself.
func (cn *conn) Broken() bool { return false }
func (cn *conn) Close()       { _ = cn.client.Close() }

// Destination returns where c's messages go, signed for t. c must come
// from ParseConfig; one that did not gives a destination whose every
// attempt is a Retry saying so.
func (p *Pool) Destination(c Config, t *outbound.Target) outbound.Destination {
	if c.url.Addr == "" {
		return broker.Refusing("the destination's configuration was not checked")
	}
	return &destination{cfg: c, target: t, pool: p, key: broker.Key{ID: c.URL, Addr: c.url.Addr}}
}

// dial makes c's client and has it PING the server within ctx, so that
// a server that cannot be reached or refuses the credentials is met with
// the pool's backoff.
func (p *Pool) dial(c Config) broker.Dial[*conn] {
	return func(ctx context.Context) (*conn, error) {
		cl := redis.NewClient(p.options(c))
		if err := cl.Ping(ctx).Err(); err != nil {
			_ = cl.Close()
			return nil, err
		}
		return &conn{client: cl}, nil
	}
}

// options are a client's: no command retried by the client (the sender
// retries, with the same entry id), the attempt's context as the bound of
// each command, one dial per command, the egress policy at every dial.
func (p *Pool) options(c Config) *redis.Options {
	d := broker.NewDialer(p.policy)
	var tlsConf *tls.Config
	if c.url.TLS {
		host, _, _ := net.SplitHostPort(c.url.Addr)
		tlsConf = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	return &redis.Options{
		Addr:     c.url.Addr,
		Username: c.url.Username(),
		Password: c.url.Password(),
		DB:       c.database(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if tlsConf == nil {
				return d.DialContext(ctx, network, addr)
			}
			return (&tls.Dialer{NetDialer: d, Config: tlsConf}).DialContext(ctx, network, addr)
		},
		DialTimeout:              broker.DialTimeout,
		DialerRetries:            1,
		MaxRetries:               -1,
		ContextTimeoutEnabled:    true,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// Close closes every client. Sends after Close answer Retry.
func (p *Pool) Close() { p.conns.Close() }
