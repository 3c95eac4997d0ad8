package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// Pool keeps one connection per server URL (address and credentials) for
// the whole process. A connection is made when a destination first needs
// it and is kept until Close; the client reconnects after a loss, waiting
// broker.Backoff between attempts. It is safe for concurrent use.
type Pool struct {
	policy egress.Policy
	log    *slog.Logger

	mu     gosync.Mutex
	conns  map[string]*conn
	closed bool
	// noConfirm publishes without waiting for the PubAck: only for the
	// test that shows the conformance suite fails without it.
	noConfirm bool
}

// NewPool returns a pool whose connections dial through p and report
// their losses and recoveries to log (addresses only, no credentials).
func NewPool(p egress.Policy, log *slog.Logger) *Pool {
	return &Pool{policy: p, log: log, conns: map[string]*conn{}}
}

// conn is one server connection. ready is closed once nc is set (or err,
// when the client could not be made at all); the client then connects
// and reconnects by itself.
type conn struct {
	addr    string
	ready   chan struct{}
	nc      *nats.Conn
	js      jetstream.JetStream
	err     error
	lastErr atomic.Pointer[string]
	// up ends when the connection in use is lost, so that publishes
	// waiting for their PubAck on it end then rather than at their
	// deadline: the PubAck of a lost connection never comes.
	up atomic.Pointer[upContext]
}

// upContext is a context that ends with one connection.
type upContext struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newUp() *upContext {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &upContext{ctx: ctx, cancel: cancel}
}

// errLost is the cause of an upContext's end.
var errLost = errors.New("connection lost before the PubAck")

// lost ends the current connection's context and starts the next one's.
func (cn *conn) lost() { cn.up.Swap(newUp()).cancel(errLost) }

// Destination returns where c's messages go, signed for t. c must come
// from ParseConfig; one that did not gives a destination whose every
// attempt is a Retry saying so.
func (p *Pool) Destination(c Config, t *outbound.Target) outbound.Destination {
	if c.url.Addr == "" {
		return broker.Refusing("the destination's configuration was not checked")
	}
	return &destination{cfg: c, target: t, conn: p.conn(c), noConfirm: p.noConfirm}
}

// conn returns the connection for c's URL, starting it if there is none.
func (p *Pool) conn(c Config) *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cn, ok := p.conns[c.URL]; ok {
		return cn
	}
	cn := &conn{addr: c.url.Addr, ready: make(chan struct{})}
	cn.up.Store(newUp())
	if p.closed {
		cn.err = errors.New("the pool is closed")
		close(cn.ready)
		return cn
	}
	p.conns[c.URL] = cn
	go p.connect(cn, c.url)
	return cn
}

// connect makes cn's client. With RetryOnFailedConnect the client returns
// at once even when the server does not answer, and keeps trying in the
// background; publishes fail meanwhile (no reconnect buffer), so nothing
// is sent later than the attempt that asked for it.
func (p *Pool) connect(cn *conn, u broker.URL) {
	defer close(cn.ready)
	note := func(err error) {
		if err != nil {
			s := err.Error()
			cn.lastErr.Store(&s)
		}
	}
	opts := []nats.Option{
		nats.Name("bothy"),
		nats.SetCustomDialer(broker.NewDialer(p.policy)),
		nats.Timeout(broker.DialTimeout),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(broker.Backoff),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(20 * time.Second),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			cn.lost()
			note(err)
			p.log.Warn("nats connection lost", slog.String("addr", cn.addr), slog.Any("error", err))
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { note(err) }),
		nats.ReconnectHandler(func(*nats.Conn) {
			p.log.Info("nats connection back", slog.String("addr", cn.addr))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { note(err) }),
		nats.ClosedHandler(func(*nats.Conn) { cn.lost() }),
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
		cn.err = fmt.Errorf("nats client for %s: %w", cn.addr, err)
		return
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		cn.err = fmt.Errorf("jetstream client for %s: %w", cn.addr, err)
		return
	}
	cn.nc, cn.js = nc, js
}

// client returns the JetStream client once the connection is up, or why
// it is not.
func (cn *conn) client(ctx context.Context) (jetstream.JetStream, error) {
	select {
	case <-cn.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("connecting to %s: %w", cn.addr, ctx.Err())
	}
	if cn.err != nil {
		return nil, cn.err
	}
	if st := cn.nc.Status(); st != nats.CONNECTED {
		why := "no connection yet"
		if s := cn.lastErr.Load(); s != nil {
			why = *s
		}
		return nil, fmt.Errorf("not connected to %s (%s): %s", cn.addr, st, why)
	}
	return cn.js, nil
}

// Close closes every connection and waits for those being made. Sends
// after Close answer Retry.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[string]*conn{}
	p.mu.Unlock()
	for _, cn := range conns {
		<-cn.ready
		if cn.nc != nil {
			cn.nc.Close()
		}
	}
}
