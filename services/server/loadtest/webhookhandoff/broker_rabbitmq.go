package webhookhandoff

import (
	"context"
	"fmt"
	"net/http"

	amqp "github.com/rabbitmq/amqp091-go"
)

// consumersPerConnection bounds the queues one AMQP connection consumes,
// so the receiver reads the broker's sockets in parallel.
const consumersPerConnection = 25

// consumeRabbitMQ declares the exchange (deleted with its last queue) and
// one exclusive queue per subscription (deleted with the receiver's
// connections), and consumes each with auto-ack on a channel of its own.
func (r *receiver) consumeRabbitMQ(_ context.Context, b *brokerParams) (func(), error) {
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
				return nil, fmt.Errorf("rabbitmq: %w", err)
			}
			conns = append(conns, conn)
		}
		msgs, err := declareQueue(conns[len(conns)-1], b, i)
		if err != nil {
			closeAll()
			return nil, err
		}
		go r.consumeQueue(i, msgs)
	}
	return closeAll, nil
}

// declareQueue declares, on a channel of conn, the exchange (the first
// time) and subscription i's queue bound to it, and consumes the queue.
func declareQueue(conn *amqp.Connection, b *brokerParams, i int) (<-chan amqp.Delivery, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: channel: %w", err)
	}
	if i == 0 {
		if err := ch.ExchangeDeclare(b.Name, "direct", false, true, false, false, nil); err != nil {
			return nil, fmt.Errorf("rabbitmq: exchange: %w", err)
		}
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err == nil {
		err = ch.QueueBind(q.Name, b.address(i), b.Name, false, nil)
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

// consumeQueue records each message of subscription i's queue.
func (r *receiver) consumeQueue(i int, msgs <-chan amqp.Delivery) {
	header := http.Header{}
	for m := range msgs {
		clear(header)
		for k, v := range m.Headers {
			if s, ok := v.(string); ok {
				header.Set(k, s)
			}
		}
		r.deliver(i, header, m.Body)
	}
}
