package jetstream

import (
	"time"

	"github.com/nats-io/nats.go"
)

// SkipConfirms makes p publish without waiting for the PubAck: a send is
// Delivered once handed to the client. Only the test that shows the
// conformance suite fails without the PubAck uses it.
func (p *Pool) SkipConfirms() { p.noConfirm = true }

// SetIdleTTL changes how long p keeps a connection no send uses.
func (p *Pool) SetIdleTTL(d time.Duration) { p.conns.SetIdleTTL(d) }

// Conn is the open connection of c's URL, if p has one.
func (p *Pool) Conn(c Config) (*nats.Conn, bool) {
	cn, ok := p.conns.Peek(c.URL)
	if !ok {
		return nil, false
	}
	return cn.nc, true
}
