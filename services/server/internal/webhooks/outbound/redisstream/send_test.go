package redisstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/brokertest"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/redisstream"
)

// bundle is a test's key prefix and a client that reads the server
// directly (not through a proxy).
type bundle struct {
	addr   string
	client *redis.Client
	prefix string
}

// setup gives the test keys of its own, deleted when it ends.
func setup(t testing.TB) *bundle {
	t.Helper()
	b := &bundle{addr: brokertest.Redis.Addr(t), prefix: brokertest.Name("bothytest:")}
	b.client = redis.NewClient(&redis.Options{Addr: b.addr, DisableIdentity: true})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		keys, _ := b.client.Keys(ctx, b.prefix+"*").Result()
		if len(keys) > 0 {
			_ = b.client.Del(ctx, keys...).Err()
		}
		_ = b.client.Close()
	})
	return b
}

// key is the stream key of space.
func (b *bundle) key(space string) string { return b.prefix + ":" + space }

// destination is a destination for the test's keys through addr, from a
// pool of its own closed when the test ends.
func (b *bundle) destination(t testing.TB, addr string, target *outbound.Target, extra string) outbound.Destination {
	t.Helper()
	return b.destinationWith(t, brokertest.Policy, addr, target, extra)
}

func (b *bundle) destinationWith(t testing.TB, p egress.Policy, addr string, target *outbound.Target, extra string) outbound.Destination {
	t.Helper()
	c, err := redisstream.ParseConfig(json.RawMessage(fmt.Sprintf(`{"url":"redis://%s","key":"%s:{space}"%s}`, addr, b.prefix, extra)))
	require.NoError(t, err)
	pool := redisstream.NewPool(p, brokertest.Log)
	t.Cleanup(pool.Close)
	return pool.Destination(c, target)
}

// entries are the stream's entries.
func (b *bundle) entries(t *testing.T, key string) []redis.XMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	es, err := b.client.XRange(ctx, key, "-", "+").Result()
	require.NoError(t, err)
	return es
}

// requireStreamHolds checks that key's stream holds exactly msgs, in
// order, each under the entry id of its last seq, signed for target.
func (b *bundle) requireStreamHolds(t *testing.T, key string, target *outbound.Target, msgs []*outbound.Message) {
	t.Helper()
	es := b.entries(t, key)
	require.Len(t, es, len(msgs), "entries in the stream")
	for i, m := range msgs {
		e := es[i]
		require.Equal(t, strconv.FormatInt(m.LastSeq, 10)+"-0", e.ID)
		require.Equal(t, m.ID, e.Values["id"])
		require.Equal(t, strconv.FormatInt(m.Seq, 10), e.Values["seq"])
		body, _ := e.Values["body"].(string)
		require.Equal(t, string(m.Body), body, "entry %d", i)
		h := map[string]string{}
		for k, v := range e.Values {
			if k != "id" && k != "seq" && k != "body" {
				h[k], _ = v.(string)
			}
		}
		require.Equal(t, "acme", h["X-Tenant"])
		require.NoError(t, brokertest.Verify(target, h, []byte(body)), "entry %d", i)
	}
}

func TestDestination_Send(t *testing.T) {
	t.Parallel()

	t.Run("DeliversInOrderWithVerifiedSignatures", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		target := brokertest.Target()
		d := b.destination(t, b.addr, target, "")
		msgs := brokertest.Messages(t, "acme", "order.created", 1, 20)
		for _, m := range msgs {
			a := brokertest.Send(d, m)
			require.Equal(t, outbound.Delivered, a.Kind, a.Err)
		}
		b.requireStreamHolds(t, b.key("acme"), target, msgs)
	})

	t.Run("RepeatIsRefusedByRedisAndCountsAsDelivered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		target := brokertest.Target()
		d := b.destination(t, b.addr, target, "")
		msgs := brokertest.Messages(t, "acme", "order.created", 1, 3)
		for _, m := range []*outbound.Message{msgs[0], msgs[1], msgs[1], msgs[0], msgs[2]} {
			require.Equal(t, outbound.Delivered, brokertest.Send(d, m).Kind)
		}
		a := brokertest.Send(d, msgs[0])
		require.Equal(t, outbound.Delivered, a.Kind)
		require.Contains(t, a.Excerpt, "a repeat")
		b.requireStreamHolds(t, b.key("acme"), target, msgs)
	})

	t.Run("MessageBelowTheLastEntryThatTheStreamLacksIsRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		target := brokertest.Target()
		d := b.destination(t, b.addr, target, "")
		msgs := brokertest.Messages(t, "acme", "order.created", 5, 5) // seqs 5 to 9
		for _, m := range []*outbound.Message{msgs[0], msgs[4]} {
			require.Equal(t, outbound.Delivered, brokertest.Send(d, m).Kind)
		}
		a := brokertest.Send(d, msgs[2])
		require.Equal(t, outbound.Retry, a.Kind, "seq 7 cannot go in after seq 9")
		require.Contains(t, a.Err, b.key("acme"))
		require.Contains(t, a.Err, "already past entry id 7-0")
		a = brokertest.Send(d, msgs[0])
		require.Equal(t, outbound.Delivered, a.Kind, "seq 5, across the gap, is in the stream")
		require.Contains(t, a.Excerpt, "a repeat")
		b.requireStreamHolds(t, b.key("acme"), target, []*outbound.Message{msgs[0], msgs[4]})
	})

	t.Run("BatchRetriedFromItsFirstEventCountsAsDelivered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		target := brokertest.Target()
		d := b.destination(t, b.addr, target, "")
		evs := make([]*sync.Event, 4)
		for i := range evs {
			evs[i] = &sync.Event{Seq: int64(3 + i), ID: uuid.New(), Space: "acme", Type: "order.created", Actor: "test", OccurredAt: time.Now()}
		}
		batch, err := outbound.BatchMessage(uuid.New(), evs)
		require.NoError(t, err)
		require.Equal(t, outbound.Delivered, brokertest.Send(d, &batch).Kind)
		head, err := outbound.SingleMessage(evs[0])
		require.NoError(t, err)
		a := brokertest.Send(d, &head)
		require.Equal(t, outbound.Delivered, a.Kind, a.Err)
		require.Contains(t, a.Excerpt, "a repeat")
		b.requireStreamHolds(t, b.key("acme"), target, []*outbound.Message{&batch})
	})

	t.Run("ConnectionCutMidPublishIsRetryAndLosesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		proxy := brokertest.NewProxy(t, b.addr)
		target := brokertest.Target()
		d := b.destination(t, proxy.Addr(), target, "")
		msgs := brokertest.Messages(t, "acme", "order.created", 1, 12)
		for _, m := range msgs[:4] {
			brokertest.Deliver(t, d, m)
		}
		// XADD reaches the server, which adds the entry; its answer is
		// lost with the connection.
		proxy.CutOnReply()
		a := brokertest.Send(d, msgs[4])
		require.Equal(t, outbound.Retry, a.Kind, "an XADD whose answer was lost is not delivered")
		a = brokertest.Send(d, msgs[4])
		require.Equal(t, outbound.Retry, a.Kind, "no delivery while the server is unreachable")
		proxy.Restore()
		_, a = brokertest.Deliver(t, d, msgs[4])
		require.Contains(t, a.Excerpt, "a repeat", "the stream had it from the XADD whose answer was lost")
		brokertest.Deliver(t, d, msgs[5])
		proxy.Cut()
		require.Equal(t, outbound.Retry, brokertest.Send(d, msgs[6]).Kind)
		proxy.Restore()
		for _, m := range msgs[6:] {
			brokertest.Deliver(t, d, m)
		}
		b.requireStreamHolds(t, b.key("acme"), target, msgs)
	})

	t.Run("MaxLenTrimsTheStream", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.destination(t, b.addr, brokertest.Target(), `,"maxlen":10`)
		msgs := brokertest.Messages(t, "acme", "order.created", 1, 300)
		for _, m := range msgs {
			require.Equal(t, outbound.Delivered, brokertest.Send(d, m).Kind)
		}
		es := b.entries(t, b.key("acme"))
		require.GreaterOrEqual(t, len(es), 10)
		require.Less(t, len(es), 300, "MAXLEN ~ trims whole nodes once they are past the bound")
		require.Equal(t, "300-0", es[len(es)-1].ID)
	})

	t.Run("TestSendGoesAfterTheLastEntry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		target := brokertest.Target()
		d := b.destination(t, b.addr, target, "")
		test := brokertest.Messages(t, "acme", "webhook.test", 0, 1)[0]
		a := brokertest.Send(d, test)
		require.Equal(t, outbound.Delivered, a.Kind, a.Err)
		require.Contains(t, a.Excerpt, "entry 0-1 ")
		msgs := brokertest.Messages(t, "acme", "order.created", 1, 3)
		for _, m := range msgs {
			require.Equal(t, outbound.Delivered, brokertest.Send(d, m).Kind)
		}
		a = brokertest.Send(d, test)
		require.Equal(t, outbound.Delivered, a.Kind, a.Err)
		require.Contains(t, a.Excerpt, "entry 3-1 ")
		more := brokertest.Messages(t, "acme", "order.created", 4, 1)[0]
		require.Equal(t, outbound.Delivered, brokertest.Send(d, more).Kind, "a test send does not move the stream past seqs to come")
		require.Len(t, b.entries(t, b.key("acme")), 6)
	})

	t.Run("KeyOfAnotherTypeIsRetryWithRedisReason", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, b.client.Set(ctx, b.key("acme"), "not a stream", 0).Err())
		d := b.destination(t, b.addr, brokertest.Target(), "")
		a := brokertest.Send(d, brokertest.Messages(t, "acme", "order.created", 1, 1)[0])
		require.Equal(t, outbound.Retry, a.Kind)
		require.Contains(t, a.Err, "WRONGTYPE")
		require.Contains(t, a.Err, b.key("acme"))
	})

	t.Run("ServerDownIsRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		proxy := brokertest.NewProxy(t, b.addr)
		proxy.Cut()
		d := b.destination(t, proxy.Addr(), brokertest.Target(), "")
		a := brokertest.Send(d, brokertest.Messages(t, "acme", "order.created", 1, 1)[0])
		require.Equal(t, outbound.Retry, a.Kind)
		require.Contains(t, a.Err, proxy.Addr())
		require.Empty(t, b.entries(t, b.key("acme")))
	})

	t.Run("EgressPolicyRefusesAPrivateServer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.destinationWith(t, egress.Policy{}, b.addr, brokertest.Target(), "")
		a := brokertest.Send(d, brokertest.Messages(t, "acme", "order.created", 1, 1)[0])
		require.Equal(t, outbound.Retry, a.Kind)
		require.Contains(t, a.Err, "webhooks.allow_private_targets")
		require.Empty(t, b.entries(t, b.key("acme")))
	})
}
