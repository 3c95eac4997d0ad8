package broker

import (
	"fmt"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// DialTimeout bounds one connection attempt to a broker.
const DialTimeout = 5 * time.Second

// NewDialer returns the dialer of every broker connection: p at each dial
// (after name resolution, so a name that now resolves to a refused address
// is refused too), a refusal wrapping outbound.ErrTargetRefused and
// naming the setting that would lift it, TCP keep-alives, and
// DialTimeout.
func NewDialer(p egress.Policy) *net.Dialer {
	control := func(network, address string, c syscall.RawConn) error {
		if err := p.Control(network, address, c); err != nil {
			return fmt.Errorf("%w: %w%s", outbound.ErrTargetRefused, err, outbound.PrivateHint(err))
		}
		return nil
	}
	return &net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second, Control: control}
}

// Backoff is the wait before the attempt-th reconnection (from 1): from
// 250 ms, doubling to at most 15 s, less up to a fifth at random so that
// the connections a broker's restart dropped do not all come back at once.
func Backoff(attempt int) time.Duration {
	d := 250 * time.Millisecond
	for i := 1; i < attempt && d < 15*time.Second; i++ {
		d *= 2
	}
	d = min(d, 15*time.Second)
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}
