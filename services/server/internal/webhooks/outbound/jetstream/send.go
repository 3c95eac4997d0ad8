package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
)

// destination publishes one subscription's messages.
type destination struct {
	cfg    Config
	target *outbound.Target
	pool   *Pool
	key    broker.Key
}

// Send publishes m on the subject its space and type make, with the
// signature headers and Nats-Msg-Id set to m's repeat key (its id, and
// for a resend the resend's time too), and waits for the stream's
// acknowledgement within ctx. A stream that already holds the key (a
// repeat within its duplicate window) acknowledges it as a duplicate
// without storing it again: that is Delivered too. Everything
// else is Retry with the reason: no connection, no stream taking the
// subject, no acknowledgement in time, the server's refusal.
func (d *destination) Send(ctx context.Context, m *outbound.Message, ts time.Time) outbound.Answer {
	subject := d.cfg.subject.Render(m.Space, m.Type)
	if why := subjectProblem(subject); why != "" {
		return retry("subject %q: %s", subject, why)
	}
	msg, err := natsMsg(d.target, m, ts, subject)
	if err != nil {
		return retry("%s", err)
	}
	cn, release, err := d.pool.conns.Acquire(ctx, d.key, d.pool.dial(d.cfg.url))
	if err != nil {
		return retry("%s", err)
	}
	defer release()
	addr := d.key.Addr
	if d.pool.noConfirm {
		msg.Header.Set(jetstream.MsgIDHeader, m.RepeatKey())
		if err := cn.nc.PublishMsg(msg); err != nil {
			return retry("publishing on %q to %s: %s", subject, addr, err)
		}
		return outbound.Answer{Kind: outbound.Delivered}
	}
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(m.RepeatKey())}
	if d.cfg.Stream != "" {
		opts = append(opts, jetstream.WithExpectStream(d.cfg.Stream))
	}
	ack, err := publish(ctx, cn, msg, opts)
	switch {
	case errors.Is(err, errLost):
		return retry("publishing on %q to %s: %s", subject, addr, errLost)
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		if d.cfg.Stream != "" {
			return retry("no stream takes subject %q (stream %q expected) on %s", subject, d.cfg.Stream, addr)
		}
		return retry("no stream takes subject %q on %s", subject, addr)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, nats.ErrTimeout):
		return retry("no acknowledgement from %s for subject %q within the attempt's time", addr, subject)
	case err != nil:
		return retry("publishing on %q to %s: %s", subject, addr, err)
	}
	a := outbound.Answer{Kind: outbound.Delivered, Excerpt: fmt.Sprintf("stream %s seq %d", ack.Stream, ack.Sequence)}
	if ack.Duplicate {
		a.Excerpt += " (a repeat: the stream already held this message id)"
	}
	return a
}

// publish publishes msg and waits for its PubAck until ctx ends or the
// connection it went out on is lost (the error is then errLost).
func publish(ctx context.Context, cn *conn, msg *nats.Msg, opts []jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(cn.lost, func() { cancel(errLost) })
	defer stop()
	ack, err := cn.js.PublishMsg(ctx, msg, opts...)
	if err != nil && context.Cause(ctx) == errLost {
		return nil, errLost
	}
	return ack, err
}

// natsMsg is m on subject with the signature headers. Headers that
// JetStream reads (Nats-*) are left out of the custom ones: a
// subscription's header could otherwise roll the stream up, expect
// another stream or set a TTL.
func natsMsg(t *outbound.Target, m *outbound.Message, ts time.Time, subject string) (*nats.Msg, error) {
	h, err := outbound.Signed(t, m, ts)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: subject, Data: m.Body, Header: make(nats.Header, len(h)+1)}
	for name, v := range h {
		if !strings.HasPrefix(strings.ToLower(name), "nats-") {
			msg.Header.Set(name, v)
		}
	}
	return msg, nil
}

func retry(format string, args ...any) outbound.Answer {
	return outbound.Answer{Kind: outbound.Retry, Err: fmt.Sprintf(format, args...)}
}
