package rabbitmq_test

import (
	"fmt"
	"slices"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/outboundtest"
)

// senders is how many ordered senders BenchmarkDestination_SendConcurrent
// runs at once, as many as the hand-off test's subscriptions.
const senders = 100

// pace is each sender's time between messages: 500 messages a second in
// all, the hand-off test's rate.
const pace = 200 * time.Millisecond

// BenchmarkDestination_SendConcurrent is many ordered senders at once,
// each publishing to a queue of its own and waiting for each confirmation
// before its next publish, as the worker's ordered subscriptions do, at
// most one message per pace each (the hand-off test's load); one
// sub-benchmark per queue type the queues are declared as. Its figure is
// the confirmed publish's latency (p50, p95), not the time per message,
// which the pace sets.
func BenchmarkDestination_SendConcurrent(b *testing.B) {
	for _, q := range []struct {
		name    string
		durable bool
		args    amqp.Table
	}{
		{"ClassicTransient", false, nil},
		{"ClassicDurable", true, nil},
		{"Quorum", true, amqp.Table{"x-queue-type": "quorum"}},
	} {
		b.Run(q.name, func(b *testing.B) {
			broker := brokerURL(b)
			exchange := queuesOfType(b, broker, q.durable, q.args)
			c := config(b, `{"url":`+quote(broker)+`,"exchange":`+quote(exchange)+`,"routing_key":"{space}"}`)
			d := newPool(b).Destination(c, &outbound.Target{Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
			lat := sendPaced(b, d, true)
			reportLatency(b, lat)
		})
	}
}

// BenchmarkDestination_SendBurst is the senders of
// BenchmarkDestination_SendConcurrent all sending at the same moments, as
// when the worker is behind and every ordered sender has its next message
// ready, to transient queues; its sub-benchmarks keep fewer idle channels
// than there are senders (a send may open a channel and close it after)
// or more (no send opens one after the first round).
func BenchmarkDestination_SendBurst(b *testing.B) {
	for _, idle := range []int{64, 1024} {
		b.Run(fmt.Sprint("IdleChannels", idle), func(b *testing.B) {
			broker := brokerURL(b)
			exchange := queuesOfType(b, broker, false, nil)
			c := config(b, `{"url":`+quote(broker)+`,"exchange":`+quote(exchange)+`,"routing_key":"{space}"}`)
			pool := newPool(b)
			pool.SetIdleChannels(idle)
			d := pool.Destination(c, &outbound.Target{Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
			reportLatency(b, sendPaced(b, d, false))
		})
	}
}

// sendPaced runs the senders, each sending b.N/senders messages one pace
// apart to its queue, spread over the pace or all at once, and returns
// each send's time to its confirmation.
func sendPaced(b *testing.B, d outbound.Destination, spread bool) []time.Duration {
	b.Helper()
	lat := make([][]time.Duration, senders)
	per := max(b.N/senders, 1)
	b.ResetTimer()
	var wg gosync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			if spread {
				<-time.After(time.Duration(i) * pace / senders)
			}
			tick := time.NewTicker(pace)
			defer tick.Stop()
			for n := range per {
				<-tick.C
				start := time.Now()
				if a := d.Send(b.Context(), outboundtest.Message(fmt.Sprint("q", i), int64(n+1)), start); a.Kind != outbound.Delivered {
					b.Error(a.Err)
					return
				}
				lat[i] = append(lat[i], time.Since(start))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	return slices.Concat(lat...)
}

// reportLatency reports the p50 and p95 of lat.
func reportLatency(b *testing.B, lat []time.Duration) {
	all := slices.Sorted(slices.Values(lat))
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(all[len(all)*95/100].Microseconds())/1000, "p95-ms")
	}
}

// queuesOfType declares an exchange with senders queues bound to it, q0…,
// each of the given durability and arguments, consumed with auto-ack as
// the hand-off test's receiver does; all are deleted at the end.
func queuesOfType(b *testing.B, broker string, durable bool, args amqp.Table) string {
	b.Helper()
	conn, err := amqp.Dial(broker)
	require.NoError(b, err)
	ch, err := conn.Channel()
	require.NoError(b, err)
	exchange := "bothy-bench-" + uuid.NewString()
	require.NoError(b, ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil))
	var names []string
	for i := range senders {
		q, err := ch.QueueDeclare("bothy-bench-"+uuid.NewString(), durable, false, false, false, args)
		require.NoError(b, err)
		require.NoError(b, ch.QueueBind(q.Name, fmt.Sprint("q", i), exchange, false, nil))
		msgs, err := ch.Consume(q.Name, "", true, false, false, false, nil)
		require.NoError(b, err)
		go func() {
			for range msgs {
			}
		}()
		names = append(names, q.Name)
	}
	b.Cleanup(func() {
		for _, n := range names {
			_, _ = ch.QueueDelete(n, false, false, false)
		}
		_ = ch.ExchangeDelete(exchange, false, false)
		_ = conn.Close()
	})
	return exchange
}
