package rabbitmq

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// channel is a channel in confirm mode used by one send at a time, so the
// return and the confirmation it sees are its message's: the broker sends
// a mandatory message's return before its ack, on the same channel.
type channel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
}

// destination publishes a target's messages with its config.
type destination struct {
	cfg    Config
	target *outbound.Target
	pool   *Pool
	key    broker.Key
}

// Send publishes m, signed at ts, and waits for the broker's confirmation
// within ctx.
func (d *destination) Send(ctx context.Context, m *outbound.Message, ts time.Time) outbound.Answer {
	headers, err := outbound.Signed(d.target, m, ts)
	if err != nil {
		return retry(err.Error())
	}
	cn, release, err := d.pool.conns.Acquire(ctx, d.key, d.pool.dial(d.cfg.URL))
	if err != nil {
		return retry("broker: " + scrub(err, d.cfg.URL))
	}
	defer release()
	ch, err := cn.channel()
	if err != nil {
		return retry("broker: " + scrub(err, d.cfg.URL))
	}
	a, reusable := d.publish(ctx, ch, d.cfg.key(m), d.publishing(m, headers, ts))
	if reusable {
		cn.put(ch)
	} else {
		_ = ch.ch.Close()
	}
	return a
}

// publishing is the AMQP message of m.
func (d *destination) publishing(m *outbound.Message, headers map[string]string, ts time.Time) amqp.Publishing {
	t := make(amqp.Table, len(headers))
	for k, v := range headers {
		t[k] = v
	}
	return amqp.Publishing{Headers: t, ContentType: "application/json", DeliveryMode: amqp.Persistent,
		MessageId: m.ID, Timestamp: ts, Type: m.Type, AppId: "bothy", Body: m.Body}
}

// publish publishes p on ch and reads the broker's answer; reusable says
// whether ch may carry the next send.
func (d *destination) publish(ctx context.Context, ch *channel, key string, p amqp.Publishing) (outbound.Answer, bool) {
	ch.drainReturns()
	dc, err := ch.ch.PublishWithDeferredConfirmWithContext(ctx, d.cfg.Exchange, key, true, false, p)
	if err != nil {
		return retry("publish: " + err.Error()), false
	}
	if dc == nil { // no confirm mode: written to the socket is all that is known
		return outbound.Answer{Kind: outbound.Delivered}, true
	}
	select {
	case <-dc.Done():
	case <-ctx.Done():
		return retry("no confirmation from the broker: " + ctx.Err().Error()), false
	}
	if !dc.Acked() {
		if why := closedReason(ch); why != "" {
			return retry(why), false
		}
		return retry("broker nacked the message"), true
	}
	select {
	case r, ok := <-ch.returns:
		if !ok { // closed after the ack
			return outbound.Answer{Kind: outbound.Delivered}, false
		}
		return retry(fmt.Sprintf("broker returned the message: %d %s (exchange %q, routing key %q has no queue bound)",
			r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)), true
	default:
	}
	return outbound.Answer{Kind: outbound.Delivered}, true
}

// drainReturns drops a return left by an earlier send that ended without
// reading it (a nack after the return).
func (ch *channel) drainReturns() {
	for {
		select {
		case _, ok := <-ch.returns:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// closedReason is why ch was closed, "" if it is open.
func closedReason(ch *channel) string {
	select {
	case e, ok := <-ch.closes:
		if ok && e != nil {
			return fmt.Sprintf("broker closed the channel: %d %s", e.Code, e.Reason)
		}
		return "broker connection closed"
	default:
		return ""
	}
}

func retry(reason string) outbound.Answer { return outbound.Answer{Kind: outbound.Retry, Err: reason} }
