package mqtt

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// Pool keeps one connection per broker URL (address and credentials) for
// the whole process, each under a client id of its own, in a broker.Pool:
// made when a destination first needs it, made again after a loss (with
// broker.Backoff between failed dials), closed once unused for
// broker.IdleTTL or at Close. It is safe for concurrent use.
type Pool struct {
	policy egress.Policy
	conns  *broker.Pool[*conn]
	// noConfirm publishes at QoS 0, without a PUBACK: only for the test
	// that shows the conformance suite fails without it.
	noConfirm bool
}

// NewPool returns a pool whose connections dial through p and report
// their losses and recoveries to log (addresses only, no credentials).
func NewPool(p egress.Policy, log *slog.Logger) *Pool {
	return &Pool{policy: p, conns: broker.NewPool[*conn]("mqtt", log)}
}

// conn is one broker connection.
type conn struct{ client paho.Client }

func (cn *conn) Broken() bool { return !cn.client.IsConnectionOpen() }
func (cn *conn) Close()       { cn.client.Disconnect(250) }

// Destination returns where c's messages go, signed for t. c must come
// from ParseConfig; one that did not gives a destination whose every
// attempt is a Retry saying so.
func (p *Pool) Destination(c Config, t *outbound.Target) outbound.Destination {
	if c.url.Addr == "" {
		return broker.Refusing("the destination's configuration was not checked")
	}
	return &destination{cfg: c, target: t, pool: p, key: broker.Key{ID: c.URL, Addr: c.url.Addr}}
}

// dial connects to c's broker, within ctx.
func (p *Pool) dial(c Config) broker.Dial[*conn] {
	return func(ctx context.Context) (*conn, error) {
		client := paho.NewClient(p.options(c))
		tok := client.Connect()
		select {
		case <-tok.Done():
		case <-ctx.Done():
			go func() { <-tok.Done(); client.Disconnect(0) }() // bounded by the connect timeout
			return nil, ctx.Err()
		}
		if err := tok.Error(); err != nil {
			return nil, fmt.Errorf("mqtt connect: %w", err)
		}
		return &conn{client: client}, nil
	}
}

// options are a connection's: MQTT 3.1.1, a clean session, and no
// reconnection or publish kept by the client across a loss, so that a
// publish the loss interrupted fails at once (its Send answers Retry) and
// is never sent later behind the sender's back; the pool dials again
// instead.
func (p *Pool) options(c Config) *paho.ClientOptions {
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
	return o
}

// clientID is unique per connection: a broker drops the older of two
// connections with the same client id.
func clientID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "bothy-" + hex.EncodeToString(b[:])
}

// Close disconnects every connection. Sends after Close answer Retry.
func (p *Pool) Close() { p.conns.Close() }
