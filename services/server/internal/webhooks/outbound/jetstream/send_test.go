package jetstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/brokertest"
	bjs "github.com/bothy/bothy/services/server/internal/webhooks/outbound/jetstream"
)

// bundle is a test's stream, read directly (not through the proxy), and
// the subject prefix it takes.
type bundle struct {
	addr   string
	stream jetstream.Stream
	name   string
	prefix string
}

// setup makes a stream of its own for the test, taking "<prefix>.>", and
// deletes it when the test ends.
func setup(t testing.TB) *bundle {
	t.Helper()
	addr := brokertest.NATS.Addr(t)
	nc, err := nats.Connect("nats://" + addr)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	b := &bundle{addr: addr, name: brokertest.Name("BOTHYTEST_"), prefix: brokertest.Name("bothytest")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.stream, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: b.name, Subjects: []string{b.prefix + ".>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, b.name)
	})
	return b
}

// destination is a destination for b's stream through addr, from a pool
// of its own closed when the test ends.
func (b *bundle) destination(t testing.TB, addr string, target *outbound.Target, extra string) outbound.Destination {
	t.Helper()
	c, err := bjs.ParseConfig(json.RawMessage(fmt.Sprintf(`{"url":"nats://%s","subject":"%s.{space}.{type}"%s}`, addr, b.prefix, extra)))
	require.NoError(t, err)
	pool := bjs.NewPool(brokertest.Policy, brokertest.Log)
	t.Cleanup(pool.Close)
	return pool.Destination(c, target)
}

// requireStreamHolds checks that the stream holds exactly msgs, in order,
// each under its id, signed for target.
func (b *bundle) requireStreamHolds(t *testing.T, target *outbound.Target, msgs []*outbound.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := b.stream.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(msgs), info.State.Msgs, "messages in the stream")
	for i, m := range msgs {
		got, err := b.stream.GetMsg(ctx, uint64(i+1))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%s.%s.%s", b.prefix, m.Space, m.Type), got.Subject)
		require.Equal(t, string(m.Body), string(got.Data), "message %d", i)
		require.Equal(t, m.ID, got.Header.Get(jetstream.MsgIDHeader))
		require.Equal(t, "acme", got.Header.Get("X-Tenant"))
		require.Empty(t, got.Header.Get("Nats-Rollup"), "a subscription's Nats-* header is left out")
		h := map[string]string{}
		for k := range got.Header {
			h[k] = got.Header.Get(k)
		}
		require.NoError(t, brokertest.Verify(target, h, got.Data), "message %d", i)
	}
}

func TestDestination_Send(t *testing.T) {
	t.Parallel()

	t.Run("DeliversInOrderWithVerifiedSignatures", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		target := brokertest.Target()
		target.Headers["Nats-Rollup"] = "all"
		d := b.destination(t, b.addr, target, "")
		msgs := brokertest.Messages(t, "acme", "order.created", 1, 20)
		for _, m := range msgs {
			a := brokertest.Send(d, m)
			require.Equal(t, outbound.Delivered, a.Kind, a.Err)
			require.Contains(t, a.Excerpt, "stream "+b.name)
		}
		b.requireStreamHolds(t, target, msgs)
	})

	t.Run("RepeatIsDroppedByTheStreamAndCountsAsDelivered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		target := brokertest.Target()
		d := b.destination(t, b.addr, target, "")
		msgs := brokertest.Messages(t, "acme", "order.created", 1, 2)
		for _, m := range []*outbound.Message{msgs[0], msgs[0], msgs[1], msgs[1]} {
			require.Equal(t, outbound.Delivered, brokertest.Send(d, m).Kind)
		}
		a := brokertest.Send(d, msgs[0])
		require.Equal(t, outbound.Delivered, a.Kind)
		require.Contains(t, a.Excerpt, "a repeat")
		b.requireStreamHolds(t, target, msgs)
	})

	t.Run("ConnectionCutMidPublishIsRetryAndLosesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		proxy := brokertest.NewProxy(t, b.addr)
		target := brokertest.Target()
		d := b.destination(t, proxy.Addr(), target, "")
		msgs := brokertest.Messages(t, "acme", "order.created", 1, 12)
		for _, m := range msgs[:4] {
			_, a := brokertest.Deliver(t, d, m)
			require.Equal(t, outbound.Delivered, a.Kind)
		}
		// The publish reaches the server, which stores it; its PubAck is
		// lost with the connection.
		proxy.CutOnReply()
		a := brokertest.Send(d, msgs[4])
		require.Equal(t, outbound.Retry, a.Kind, "an attempt whose PubAck was lost is not delivered")
		require.NotEmpty(t, a.Err)
		a = brokertest.Send(d, msgs[4])
		require.Equal(t, outbound.Retry, a.Kind, "no delivery while the server is unreachable")
		proxy.Restore()
		_, a = brokertest.Deliver(t, d, msgs[4])
		require.Contains(t, a.Excerpt, "a repeat", "the stream had it from the attempt whose PubAck was lost")
		// A cut between publishes.
		_, _ = brokertest.Deliver(t, d, msgs[5])
		proxy.Cut()
		require.Equal(t, outbound.Retry, brokertest.Send(d, msgs[6]).Kind)
		proxy.Restore()
		for _, m := range msgs[6:] {
			_, a := brokertest.Deliver(t, d, m)
			require.Equal(t, outbound.Delivered, a.Kind)
		}
		b.requireStreamHolds(t, target, msgs)
	})

	t.Run("NoStreamForTheSubjectIsRetryNamingIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c, err := bjs.ParseConfig(json.RawMessage(fmt.Sprintf(`{"url":"nats://%s","subject":"%s.{type}"}`, b.addr, brokertest.Name("nostream"))))
		require.NoError(t, err)
		pool := bjs.NewPool(brokertest.Policy, brokertest.Log)
		t.Cleanup(pool.Close)
		m := brokertest.Messages(t, "acme", "order.created", 1, 1)[0]
		a := brokertest.Send(pool.Destination(c, brokertest.Target()), m)
		require.Equal(t, outbound.Retry, a.Kind)
		require.Contains(t, a.Err, "no stream takes subject")
		require.Contains(t, a.Err, ".order.created")
	})

	t.Run("AnotherStreamThanTheConfiguredOneIsRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.destination(t, b.addr, brokertest.Target(), `,"stream":"NOT_THIS_ONE"`)
		a := brokertest.Send(d, brokertest.Messages(t, "acme", "order.created", 1, 1)[0])
		require.Equal(t, outbound.Retry, a.Kind)
		require.Contains(t, a.Err, "expected stream")
		b.requireStreamHolds(t, nil, nil)
	})

	t.Run("ServerDownIsRetryNamingTheAddress", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		proxy := brokertest.NewProxy(t, b.addr)
		proxy.Cut()
		d := b.destination(t, proxy.Addr(), brokertest.Target(), "")
		a := brokertest.Send(d, brokertest.Messages(t, "acme", "order.created", 1, 1)[0])
		require.Equal(t, outbound.Retry, a.Kind)
		require.Contains(t, a.Err, "not connected to "+proxy.Addr())
	})

	t.Run("EgressPolicyRefusesAPrivateServer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c, err := bjs.ParseConfig(json.RawMessage(fmt.Sprintf(`{"url":"nats://%s","subject":"%s.x"}`, b.addr, b.prefix)))
		require.NoError(t, err)
		pool := bjs.NewPool(egress.Policy{}, brokertest.Log)
		t.Cleanup(pool.Close)
		d := pool.Destination(c, brokertest.Target())
		m := brokertest.Messages(t, "acme", "order.created", 1, 1)[0]
		// The first attempt's refusal reaches the client's report a moment
		// after the attempt.
		var a outbound.Answer
		testwait.Until(t, time.Minute, func() bool {
			a = brokertest.Send(d, m)
			require.Equal(t, outbound.Retry, a.Kind)
			return strings.Contains(a.Err, "webhooks.allow_private_targets")
		}, "the egress refusal in the answer")
		require.Contains(t, a.Err, "loopback")
		b.requireStreamHolds(t, nil, nil)
	})

	t.Run("ClosedPoolIsRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c, err := bjs.ParseConfig(json.RawMessage(fmt.Sprintf(`{"url":"nats://%s","subject":"%s.x"}`, b.addr, b.prefix)))
		require.NoError(t, err)
		pool := bjs.NewPool(brokertest.Policy, brokertest.Log)
		d := pool.Destination(c, brokertest.Target())
		m := brokertest.Messages(t, "acme", "order.created", 1, 2)
		require.Equal(t, outbound.Delivered, brokertest.Send(d, m[0]).Kind)
		pool.Close()
		require.Equal(t, outbound.Retry, brokertest.Send(d, m[1]).Kind)
		require.Equal(t, outbound.Retry, brokertest.Send(pool.Destination(c, brokertest.Target()), m[1]).Kind)
	})

	t.Run("RotatedCredentialsConnectionIsClosed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pool := bjs.NewPool(brokertest.Policy, brokertest.Log)
		t.Cleanup(pool.Close)
		pool.SetIdleTTL(20 * time.Millisecond)
		config := func(user string) bjs.Config {
			c, err := bjs.ParseConfig(json.RawMessage(fmt.Sprintf(`{"url":"nats://%s:pw@%s","subject":"%s.{space}.{type}"}`, user, b.addr, b.prefix)))
			require.NoError(t, err)
			return c
		}
		before, after := config("before"), config("after")
		m := brokertest.Messages(t, "acme", "order.created", 1, 2)
		require.Equal(t, outbound.Delivered, brokertest.Send(pool.Destination(before, brokertest.Target()), m[0]).Kind)
		old, ok := pool.Conn(before)
		require.True(t, ok)
		// The subscription's URL is changed (its password rotated): its
		// sends use the new one, and the old connection goes.
		d := pool.Destination(after, brokertest.Target())
		require.Equal(t, outbound.Delivered, brokertest.Send(d, m[1]).Kind)
		testwait.Until(t, time.Minute, old.IsClosed, "the rotated credentials' connection closed")
		require.Equal(t, outbound.Delivered, brokertest.Send(d, m[1]).Kind, "the new credentials still send")
	})
}
