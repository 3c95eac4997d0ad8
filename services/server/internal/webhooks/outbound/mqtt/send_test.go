package mqtt_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/brokertest"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/mqtt"
)

// bundle is a test's topic prefix and what a subscriber connected
// directly to the broker (not through a proxy) received under it.
type bundle struct {
	addr     string
	prefix   string
	received chan paho.Message
}

// setup subscribes at QoS 1 to the test's own topics, until the test
// ends.
func setup(t testing.TB) *bundle {
	t.Helper()
	b := &bundle{addr: brokertest.MQTT.Addr(t), prefix: brokertest.Name("bothytest"), received: make(chan paho.Message, 1024)}
	o := paho.NewClientOptions().AddBroker("tcp://" + b.addr).SetClientID(brokertest.Name("bothytest-sub-")).
		SetCleanSession(true).SetAutoReconnect(false)
	c := paho.NewClient(o)
	tok := c.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second), "subscriber connect")
	require.NoError(t, tok.Error())
	t.Cleanup(func() { c.Disconnect(250) })
	tok = c.Subscribe(b.prefix+"/#", 1, func(_ paho.Client, m paho.Message) {
		select {
		case b.received <- m:
		default: // more than a test reads (a benchmark's): dropped rather than stall the subscriber
		}
	})
	require.True(t, tok.WaitTimeout(10*time.Second), "subscribe")
	require.NoError(t, tok.Error())
	return b
}

// destination is a destination for the test's topics through addr, from
// a pool of its own closed when the test ends.
func (b *bundle) destination(t testing.TB, p egress.Policy, addr string, target *outbound.Target) outbound.Destination {
	t.Helper()
	c, err := mqtt.ParseConfig(json.RawMessage(fmt.Sprintf(`{"url":"mqtt://%s","topic":"%s/{space}/{type}"}`, addr, b.prefix)))
	require.NoError(t, err)
	pool := mqtt.NewPool(p, brokertest.Log)
	t.Cleanup(pool.Close)
	return pool.Destination(c, target)
}

// arrival is one message the subscriber received.
type arrival struct {
	topic   string
	payload mqtt.Payload
}

// receiveThrough returns what the subscriber received up to and
// including the message with id last, in order; MQTT keeps one
// publisher's messages to a topic in order, so nothing sent before last
// arrives after it.
func (b *bundle) receiveThrough(t testing.TB, last string) []arrival {
	t.Helper()
	deadline := time.After(30 * time.Second)
	var out []arrival
	for {
		select {
		case m := <-b.received:
			var p mqtt.Payload
			require.NoError(t, json.Unmarshal(m.Payload(), &p), "payload %q", m.Payload())
			out = append(out, arrival{topic: m.Topic(), payload: p})
			if p.Headers[standardwebhooks.HeaderWebhookID] == last {
				return out
			}
		case <-deadline:
			t.Fatalf("message %s not received within 30 s; %d received", last, len(out))
		}
	}
}

// requireArrivals checks that arrivals are msgs in order, each verified
// with target's secret, a message arriving again right after itself
// counted as a repeat; it returns the number of repeats.
func requireArrivals(t *testing.T, b *bundle, target *outbound.Target, msgs []*outbound.Message, arrivals []arrival) int {
	t.Helper()
	repeats, i := 0, 0
	for _, a := range arrivals {
		id := a.payload.Headers[standardwebhooks.HeaderWebhookID]
		if i > 0 && id == msgs[i-1].ID {
			repeats++
		} else {
			require.Less(t, i, len(msgs), "more messages than sent")
			require.Equal(t, msgs[i].ID, id, "arrival %d", i)
			require.Equal(t, string(msgs[i].Body), a.payload.Body, "the body is the signed bytes exactly")
			i++
		}
		require.Equal(t, b.prefix+"/acme/order.created", a.topic)
		require.Equal(t, "acme", a.payload.Headers["X-Tenant"])
		require.NoError(t, brokertest.Verify(target, a.payload.Headers, []byte(a.payload.Body)))
	}
	require.Equal(t, len(msgs), i, "every message arrived")
	return repeats
}

func TestDestination_Send(t *testing.T) {
	t.Parallel()

	t.Run("DeliversInOrderWithVerifiedSignatures", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		target := brokertest.Target()
		d := b.destination(t, brokertest.Policy, b.addr, target)
		msgs := brokertest.Messages(t, "acme", "order.created", 1, 20)
		for _, m := range msgs {
			a := brokertest.Send(d, m)
			require.Equal(t, outbound.Delivered, a.Kind, a.Err)
		}
		got := b.receiveThrough(t, msgs[len(msgs)-1].ID)
		require.Zero(t, requireArrivals(t, b, target, msgs, got))
	})

	t.Run("ConnectionCutMidPublishIsRetryAndTheRepeatIsCounted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		proxy := brokertest.NewProxy(t, b.addr)
		target := brokertest.Target()
		d := b.destination(t, brokertest.Policy, proxy.Addr(), target)
		msgs := brokertest.Messages(t, "acme", "order.created", 1, 12)
		for _, m := range msgs[:4] {
			brokertest.Deliver(t, d, m)
		}
		// The publish reaches the broker, which passes it on; its PUBACK
		// is lost with the connection.
		proxy.CutOnReply()
		a := brokertest.Send(d, msgs[4])
		require.Equal(t, outbound.Retry, a.Kind, "a publish whose PUBACK was lost is not delivered")
		<-proxy.Cuts()
		a = brokertest.Send(d, msgs[4])
		require.Equal(t, outbound.Retry, a.Kind, "no delivery while the broker is unreachable")
		proxy.Restore()
		brokertest.Deliver(t, d, msgs[4])
		brokertest.Deliver(t, d, msgs[5])
		proxy.Cut()
		require.Equal(t, outbound.Retry, brokertest.Send(d, msgs[6]).Kind)
		proxy.Restore()
		for _, m := range msgs[6:] {
			brokertest.Deliver(t, d, m)
		}
		got := b.receiveThrough(t, msgs[len(msgs)-1].ID)
		require.Equal(t, 1, requireArrivals(t, b, target, msgs, got),
			"MQTT cannot drop a repeat: the publish whose PUBACK was lost arrives twice")
	})

	t.Run("BrokerDownIsRetryNamingTheAddress", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		proxy := brokertest.NewProxy(t, b.addr)
		proxy.Cut()
		d := b.destination(t, brokertest.Policy, proxy.Addr(), brokertest.Target())
		a := brokertest.Send(d, brokertest.Messages(t, "acme", "order.created", 1, 1)[0])
		require.Equal(t, outbound.Retry, a.Kind)
		require.Contains(t, a.Err, "not connected to "+proxy.Addr())
	})

	t.Run("EgressPolicyRefusesAPrivateBroker", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.destination(t, egress.Policy{}, b.addr, brokertest.Target())
		a := brokertest.Send(d, brokertest.Messages(t, "acme", "order.created", 1, 1)[0])
		require.Equal(t, outbound.Retry, a.Kind)
		require.True(t, strings.Contains(a.Err, "webhooks.allow_private_targets"), a.Err)
	})

	t.Run("ClosedPoolIsRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c, err := mqtt.ParseConfig(json.RawMessage(fmt.Sprintf(`{"url":"mqtt://%s","topic":"%s/x"}`, b.addr, b.prefix)))
		require.NoError(t, err)
		pool := mqtt.NewPool(brokertest.Policy, brokertest.Log)
		d := pool.Destination(c, brokertest.Target())
		m := brokertest.Messages(t, "acme", "order.created", 1, 2)
		require.Equal(t, outbound.Delivered, brokertest.Send(d, m[0]).Kind)
		pool.Close()
		require.Equal(t, outbound.Retry, brokertest.Send(d, m[1]).Kind)
		require.Equal(t, outbound.Retry, brokertest.Send(pool.Destination(c, brokertest.Target()), m[1]).Kind)
	})
}
