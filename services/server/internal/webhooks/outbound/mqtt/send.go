package mqtt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// QoS is the quality of service of every publish: at least once, so the
// broker acknowledges each message (PUBACK).
const QoS = 1

// destination publishes one subscription's messages.
type destination struct {
	cfg    Config
	target *outbound.Target
	pool   *Pool
	key    broker.Key
}

// Payload is what a message's MQTT payload is: MQTT 3.1.1 has no headers,
// so the signature headers travel beside the body, which is a JSON string
// holding the signed bytes exactly (any JSON parser gives them back).
type Payload struct {
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// Send publishes m at QoS 1, not retained, on the topic its space and
// type make, and answers Delivered once the broker's PUBACK came within
// ctx. Retry otherwise: no connection, the connection lost before the
// PUBACK, no PUBACK in time. MQTT cannot drop a repeat: a publish whose
// PUBACK was lost reached the broker, and the retry that follows reaches
// subscribers a second time under the same webhook-id.
func (d *destination) Send(ctx context.Context, m *outbound.Message, ts time.Time) outbound.Answer {
	topic := d.cfg.topic.Render(m.Space, m.Type)
	payload, err := encode(d.target, m, ts)
	if err != nil {
		return retry("%s", err)
	}
	cn, release, err := d.pool.conns.Acquire(ctx, d.key, d.pool.dial(d.cfg))
	if err != nil {
		return retry("%s", err)
	}
	defer release()
	addr := d.key.Addr
	qos := byte(QoS)
	if d.pool.noConfirm {
		qos = 0
	}
	tok := cn.client.Publish(topic, qos, false, payload)
	select {
	case <-tok.Done():
	case <-ctx.Done():
		return retry("no PUBACK from %s for topic %q within the attempt's time", addr, topic)
	}
	if err := tok.Error(); err != nil {
		return retry("publishing to %q on %s: %s", topic, addr, err)
	}
	return outbound.Answer{Kind: outbound.Delivered, Excerpt: fmt.Sprintf("PUBACK for topic %q", topic)}
}

// encode is m's payload, signed at ts.
func encode(t *outbound.Target, m *outbound.Message, ts time.Time) ([]byte, error) {
	if !utf8.Valid(m.Body) {
		return nil, fmt.Errorf("message %s: body is not UTF-8 and cannot travel as a JSON string", m.ID)
	}
	h, err := outbound.Signed(t, m, ts)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(Payload{Headers: h, Body: string(m.Body)}); err != nil {
		return nil, fmt.Errorf("message %s: %w", m.ID, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func retry(format string, args ...any) outbound.Answer {
	return outbound.Answer{Kind: outbound.Retry, Err: fmt.Sprintf(format, args...)}
}
