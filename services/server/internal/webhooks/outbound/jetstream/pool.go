package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// Pool keeps one connection per server URL (address and credentials) for
// the whole process, in a broker.Pool: made when a destination first
// needs it, made again after a loss (with broker.Backoff between failed
// dials), closed once unused for broker.IdleTTL or at Close. It is safe
// for concurrent use.
type Pool struct {
	policy egress.Policy
	conns  *broker.Pool[*conn]
	// noConfirm publishes without waiting for the PubAck: only for the
	// test that shows the conformance suite fails without it.
	noConfirm bool
}

// NewPool returns a pool whose connections dial through p and report
// their losses and recoveries to log (addresses only, no credentials).
func NewPool(p egress.Policy, log *slog.Logger) *Pool {
	return &Pool{policy: p, conns: broker.NewPool[*conn]("nats", log)}
}

// conn is one server connection. The client does not reconnect by
// itself: a lost connection is closed and the pool dials a new one, so
// nothing is published later than the attempt that asked for it.
type conn struct {
	nc *nats.Conn
	js jetstream.JetStream
	// lost ends when the connection is lost, so that publishes waiting
	// for their PubAck on it end then rather than at their deadline: the
	// PubAck of a lost connection never comes.
	lost context.Context
}

// errLost is the cause of a conn's lost context.
var errLost = errors.New("connection lost before the PubAck")

func (cn *conn) Broken() bool { return !cn.nc.IsConnected() }
func (cn *conn) Close()       { cn.nc.Close() }

// Destination returns where c's messages go, signed for t. c must come
// from ParseConfig; one that did not gives a destination whose every
// attempt is a Retry saying so.
func (p *Pool) Destination(c Config, t *outbound.Target) outbound.Destination {
	if c.url.Addr == "" {
		return broker.Refusing("the destination's configuration was not checked")
	}
	return &destination{cfg: c, target: t, pool: p, key: broker.Key{ID: c.URL, Addr: c.url.Addr}}
}

// dial connects to u: one server, no reconnection, the egress policy at
// the dial.
func (p *Pool) dial(u broker.URL) broker.Dial[*conn] {
	return func(context.Context) (*conn, error) {
		cn := &conn{}
		lost, cancel := context.WithCancelCause(context.Background())
		cn.lost = lost
		opts := []nats.Option{
			nats.Name("bothy"),
			nats.SetCustomDialer(broker.NewDialer(p.policy)),
			nats.Timeout(broker.DialTimeout),
			nats.NoReconnect(),
			nats.PingInterval(20 * time.Second),
			nats.MaxPingsOutstanding(2),
			nats.DisconnectErrHandler(func(*nats.Conn, error) { cancel(errLost) }),
			nats.ClosedHandler(func(*nats.Conn) { cancel(errLost) }),
		}
		if u.TLS {
			opts = append(opts, nats.Secure())
		}
		// Credentials go as options, not in the URL: the client splits its
		// URL at commas, which a password may hold.
		switch user, pw := u.Username(), u.Password(); {
		case pw != "":
			opts = append(opts, nats.UserInfo(user, pw))
		case user != "":
			opts = append(opts, nats.Token(user))
		}
		server := u.URL()
		server.User = nil
		nc, err := nats.Connect(server.String(), opts...)
		if err != nil {
			cancel(err)
			return nil, fmt.Errorf("nats client: %w", err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("jetstream client: %w", err)
		}
		cn.nc, cn.js = nc, js
		return cn, nil
	}
}

// Close closes every connection. Sends after Close answer Retry.
func (p *Pool) Close() { p.conns.Close() }
