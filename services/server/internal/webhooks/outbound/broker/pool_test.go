package broker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/brokertest"
)

// natsConn is a plain NATS connection as a pool keeps it: the machine's
// NATS server stands for any broker.
type natsConn struct{ nc *nats.Conn }

func (c *natsConn) Broken() bool { return !c.nc.IsConnected() }
func (c *natsConn) Close()       { c.nc.Close() }

// pooled is a pool of NATS connections through a proxy of its own, and
// how many dials it made; user names tell keys apart (the server takes
// any).
type pooled struct {
	pool  *broker.Pool[*natsConn]
	proxy *brokertest.Proxy
	dials atomic.Int32
}

func newPooled(t *testing.T) *pooled {
	t.Helper()
	p := &pooled{pool: broker.NewPool[*natsConn]("nats", brokertest.Log), proxy: brokertest.NewProxy(t, brokertest.NATS.Addr(t))}
	t.Cleanup(p.pool.Close)
	return p
}

// acquire takes user's connection; release is called at the test's end
// unless the test calls it first.
func (p *pooled) acquire(t *testing.T, user string) (*natsConn, func(), error) {
	t.Helper()
	key := broker.Key{ID: "nats://" + user + ":pw@" + p.proxy.Addr(), Addr: p.proxy.Addr()}
	ctx, cancel := context.WithTimeout(t.Context(), brokertest.Attempt)
	defer cancel()
	c, release, err := p.pool.Acquire(ctx, key, func(context.Context) (*natsConn, error) {
		p.dials.Add(1)
		nc, err := nats.Connect("nats://"+p.proxy.Addr(), nats.UserInfo(user, "pw"), nats.NoReconnect(), nats.Timeout(broker.DialTimeout))
		if err != nil {
			return nil, err
		}
		return &natsConn{nc}, nil
	})
	if err == nil {
		t.Cleanup(release)
	}
	return c, release, err
}

func (p *pooled) mustAcquire(t *testing.T, user string) (*natsConn, func()) {
	t.Helper()
	c, release, err := p.acquire(t, user)
	require.NoError(t, err)
	require.True(t, c.nc.IsConnected())
	return c, release
}

func TestPool(t *testing.T) {
	t.Parallel()

	t.Run("SharesOneConnectionPerKey", func(t *testing.T) {
		t.Parallel()
		p := newPooled(t)
		a1, _ := p.mustAcquire(t, "a")
		a2, _ := p.mustAcquire(t, "a")
		b, _ := p.mustAcquire(t, "b")
		require.Same(t, a1, a2)
		require.NotSame(t, a1, b)
		require.EqualValues(t, 2, p.dials.Load())
	})

	t.Run("ReplacesABrokenConnection", func(t *testing.T) {
		t.Parallel()
		p := newPooled(t)
		first, release := p.mustAcquire(t, "a")
		release()
		p.proxy.Cut()
		p.proxy.Restore()
		var next *natsConn
		testwait.Until(t, time.Minute, func() bool {
			c, release, err := p.acquire(t, "a")
			if err != nil {
				return false
			}
			release()
			next = c
			return c != first
		}, "a new connection after the cut")
		require.True(t, next.nc.IsConnected())
		require.True(t, first.nc.IsClosed(), "the broken connection is closed")
	})

	t.Run("BacksOffAfterAFailedDial", func(t *testing.T) {
		t.Parallel()
		p := newPooled(t)
		p.proxy.Cut()
		_, _, err := p.acquire(t, "a")
		require.ErrorContains(t, err, "not connected to "+p.proxy.Addr())
		_, _, err = p.acquire(t, "a")
		require.ErrorContains(t, err, "dialling again in")
		require.EqualValues(t, 1, p.dials.Load(), "no dial during the backoff")
		p.proxy.Restore()
		testwait.Until(t, time.Minute, func() bool {
			_, _, err := p.acquire(t, "a")
			return err == nil
		}, "a connection once the broker is back")
	})

	t.Run("ClosesTheConnectionOfRotatedCredentials", func(t *testing.T) {
		t.Parallel()
		p := newPooled(t)
		p.pool.SetIdleTTL(20 * time.Millisecond)
		old, release := p.mustAcquire(t, "old")
		release() // the subscription's credentials change: "old" is used no more
		current, releaseCurrent := p.mustAcquire(t, "new")
		testwait.Until(t, time.Minute, old.nc.IsClosed, "the old credentials' connection closed")
		require.True(t, current.nc.IsConnected(), "a connection in use stays open")
		releaseCurrent()
		testwait.Until(t, time.Minute, current.nc.IsClosed, "the idle connection closed")
		again, _ := p.mustAcquire(t, "new")
		require.NotSame(t, current, again, "a key used again after its close is dialled again")
	})

	t.Run("CloseClosesEveryConnection", func(t *testing.T) {
		t.Parallel()
		p := newPooled(t)
		a, _ := p.mustAcquire(t, "a")
		b, _ := p.mustAcquire(t, "b")
		p.pool.Close()
		require.True(t, a.nc.IsClosed())
		require.True(t, b.nc.IsClosed())
		_, _, err := p.acquire(t, "a")
		require.True(t, errors.Is(err, broker.ErrPoolClosed), "%v", err)
	})

	t.Run("AWaitForAnotherDialEndsWithTheAttempt", func(t *testing.T) {
		t.Parallel()
		pool := broker.NewPool[*natsConn]("nats", brokertest.Log)
		t.Cleanup(pool.Close)
		key := broker.Key{ID: "k", Addr: "198.51.100.1:4222"}
		dialling, unblock := make(chan struct{}), make(chan struct{})
		go func() {
			_, _, _ = pool.Acquire(context.Background(), key, func(context.Context) (*natsConn, error) {
				close(dialling)
				<-unblock
				return nil, errors.New("unreachable")
			})
		}()
		<-dialling
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, _, err := pool.Acquire(ctx, key, nil)
		require.ErrorIs(t, err, context.Canceled)
		close(unblock)
	})
}
