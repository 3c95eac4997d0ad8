package webhookhandoff

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Destination kinds the load test can deliver to.
const (
	destHTTP     = "http"
	destRabbitMQ = "rabbitmq"
)

// defaultRabbitMQURL is the broker when neither --rabbitmq-url nor
// BOTHY_TEST_RABBITMQ_URL names one.
const defaultRabbitMQURL = "amqp://guest:guest@127.0.0.1:5672/"

// brokerParams is the broker the subscriptions publish to: the receiver
// declares Exchange and, for subscription k, a queue bound with the
// routing key routingKey(k).
type brokerParams struct {
	Kind     string `json:"kind"`
	URL      string `json:"url"`
	Exchange string `json:"exchange"`
}

// newBroker names this run's exchange on the broker at url.
func newBroker(kind, url string) *brokerParams {
	return &brokerParams{Kind: kind, URL: url, Exchange: "bothy-perf-" + uuid.NewString()}
}

// routingKey is subscription k's routing key: a literal template, so each
// subscription's messages reach its own queue only.
func routingKey(k int) string { return fmt.Sprintf("sub.%d", k) }

// destination is subscription k's destination object for the API.
func (b *brokerParams) destination(k int) (json.RawMessage, error) {
	return json.Marshal(map[string]string{"kind": b.Kind, "url": b.URL, "exchange": b.Exchange, "routing_key": routingKey(k)})
}

// consumersPerConnection bounds the queues one AMQP connection consumes,
// so the receiver reads the broker's sockets in parallel.
const consumersPerConnection = 25

// consumeRabbitMQ declares the exchange (deleted with its last queue) and
// one exclusive queue per endpoint (deleted with the receiver's
// connections), and consumes each with auto-ack on a channel of its own,
// recording every message as the HTTP receiver records a request. It
// returns once every consumer runs; they stop when ctx is done.
func (r *receiver) consumeRabbitMQ(ctx context.Context, b *brokerParams) error {
	var conns []*amqp.Connection
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	for i := range r.endpoints {
		if i%consumersPerConnection == 0 {
			conn, err := amqp.Dial(b.URL)
			if err != nil {
				closeAll()
				return fmt.Errorf("rabbitmq: %w", err)
			}
			conns = append(conns, conn)
		}
		msgs, err := declareQueue(conns[len(conns)-1], b.Exchange, i)
		if err != nil {
			closeAll()
			return err
		}
		go r.consume(i, msgs)
	}
	go func() {
		<-ctx.Done()
		closeAll()
	}()
	return nil
}

// declareQueue declares, on a channel of conn, the exchange (the first
// time) and subscription i's queue bound to it, and consumes the queue.
func declareQueue(conn *amqp.Connection, exchange string, i int) (<-chan amqp.Delivery, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: channel: %w", err)
	}
	if i == 0 {
		if err := ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
			return nil, fmt.Errorf("rabbitmq: exchange: %w", err)
		}
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err == nil {
		err = ch.QueueBind(q.Name, routingKey(i), exchange, false, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: queue %d: %w", i, err)
	}
	msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: consume %d: %w", i, err)
	}
	return msgs, nil
}

// consume records each message of subscription i's queue: its signature
// headers verified over its body, like a request's.
func (r *receiver) consume(i int, msgs <-chan amqp.Delivery) {
	ep := r.endpoints[i]
	header := http.Header{}
	for m := range msgs {
		clear(header)
		for k, v := range m.Headers {
			if s, ok := v.(string); ok {
				header.Set(k, s)
			}
		}
		verr := ep.verifier.Verify(m.Body, header)
		at := time.Now()
		envs, jerr := envelopes(m.Body)
		r.mu.Lock()
		r.stats.Requests++
		if verr != nil || jerr != nil {
			r.stats.BadSignatures++
		} else {
			for k := range envs {
				r.record(i, &envs[k], at)
			}
		}
		r.mu.Unlock()
	}
}
