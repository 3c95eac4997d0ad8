package mqtt

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"log/slog"
	"net"
	gosync "sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// Pool keeps one connection per broker URL (address and credentials) for
// the whole process, under a client id of its own. A connection is made
// when a destination first needs it and kept until Close; after a loss it
// is made again at once, then after broker.Backoff between failed
// attempts. It is safe for concurrent use.
type Pool struct {
	policy egress.Policy
	log    *slog.Logger

	mu     gosync.Mutex
	conns  map[string]*conn
	closed bool
	// noConfirm publishes at QoS 0, without a PUBACK: only for the test
	// that shows the conformance suite fails without it.
	noConfirm bool
}

// NewPool returns a pool whose connections dial through p and report
// their losses and recoveries to log (addresses only, no credentials).
func NewPool(p egress.Policy, log *slog.Logger) *Pool {
	return &Pool{policy: p, log: log, conns: map[string]*conn{}}
}

// conn is one broker connection and the loop that keeps it. tried is
// closed once the first attempt to connect has ended, so that a new
// destination's first send waits for it rather than finding no
// connection yet.
type conn struct {
	addr    string
	client  paho.Client
	tried   chan struct{}
	lost    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	lastErr atomic.Pointer[string]
}

func (cn *conn) note(err error) {
	if err != nil {
		s := err.Error()
		cn.lastErr.Store(&s)
	}
}

// Destination returns where c's messages go, signed for t. c must come
// from ParseConfig; one that did not gives a destination whose every
// attempt is a Retry saying so.
func (p *Pool) Destination(c Config, t *outbound.Target) outbound.Destination {
	if c.url.Addr == "" {
		return broker.Refusing("the destination's configuration was not checked")
	}
	cn := p.conn(c)
	if cn == nil {
		return broker.Refusing("the destination pool is closed")
	}
	return &destination{cfg: c, target: t, conn: cn, noConfirm: p.noConfirm}
}

// conn returns the connection of c's URL, starting it if there is none;
// nil once the pool is closed.
func (p *Pool) conn(c Config) *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if cn, ok := p.conns[c.URL]; ok {
		return cn
	}
	cn := &conn{addr: c.url.Addr, tried: make(chan struct{}), lost: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	cn.client = paho.NewClient(p.options(c, cn))
	p.conns[c.URL] = cn
	go p.keep(cn)
	return cn
}

// options are a connection's: MQTT 3.1.1, a clean session, and no
// reconnection or publish kept by the client across a loss, so that a
// publish the loss interrupted fails at once (its Send answers Retry) and
// is never sent later behind the sender's back; keep reconnects instead.
func (p *Pool) options(c Config, cn *conn) *paho.ClientOptions {
	scheme := "tcp://"
	o := paho.NewClientOptions()
	if c.url.TLS {
		scheme = "ssl://"
		host, _, _ := net.SplitHostPort(c.url.Addr)
		o.SetTLSConfig(&tls.Config{ServerName: host, MinVersion: tls.VersionTLS12})
	}
	o.AddBroker(scheme + c.url.Addr)
	o.SetUsername(c.url.Username())
	o.SetPassword(c.url.Password())
	o.SetClientID(clientID())
	o.SetProtocolVersion(4)
	o.SetCleanSession(true)
	o.SetAutoReconnect(false)
	o.SetConnectRetry(false)
	o.SetConnectTimeout(broker.DialTimeout)
	o.SetWriteTimeout(broker.DialTimeout)
	o.SetKeepAlive(30 * time.Second)
	o.SetPingTimeout(10 * time.Second)
	o.SetDialer(broker.NewDialer(p.policy))
	o.SetConnectionLostHandler(func(_ paho.Client, err error) {
		cn.note(err)
		select {
		case cn.lost <- struct{}{}:
		default:
		}
	})
	return o
}

// clientID is unique per connection: a broker drops the older of two
// connections with the same client id.
func clientID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "bothy-" + hex.EncodeToString(b[:])
}

// keep connects cn, and connects it again after each loss, until Close.
func (p *Pool) keep(cn *conn) {
	defer close(cn.done)
	failed := 0
	for n := 0; ; n++ {
		select {
		case <-cn.lost: // the previous connection's, already handled
		default:
		}
		tok := cn.client.Connect()
		<-tok.Done() // bounded by the connect timeout
		if n == 0 {
			close(cn.tried)
		}
		if err := tok.Error(); err != nil {
			cn.note(err)
			failed++
			if failed == 1 {
				p.log.Warn("mqtt connection failed", slog.String("addr", cn.addr), slog.Any("error", err))
			}
			select {
			case <-time.After(broker.Backoff(failed)):
				continue
			case <-cn.stop:
				return
			}
		}
		if failed > 0 {
			p.log.Info("mqtt connection back", slog.String("addr", cn.addr))
		}
		failed = 0
		select {
		case <-cn.lost:
			p.log.Warn("mqtt connection lost", slog.String("addr", cn.addr), slog.String("error", cn.why()))
		case <-cn.stop:
			cn.client.Disconnect(250)
			return
		}
	}
}

// why is the last connection error, or "no connection yet".
func (cn *conn) why() string {
	if s := cn.lastErr.Load(); s != nil {
		return *s
	}
	return "no connection yet"
}

// Close disconnects every connection and waits for their loops to end.
// Sends after Close answer Retry.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[string]*conn{}
	p.mu.Unlock()
	for _, cn := range conns {
		close(cn.stop)
	}
	for _, cn := range conns {
		<-cn.done
	}
}
