package webhookhandoff

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// consumeJetStream creates a file stream taking the run's subjects (the
// destinations name it, so a message stored elsewhere is refused), and
// receives what is published on them through a plain subscription, with
// no limit on what it may hold pending: the stream is the destination's
// confirmation, the subscription only how the receiver sees each message
// arrive. Stopping deletes the stream; its messages expire within an hour
// should the receiver be killed first.
func (r *receiver) consumeJetStream(ctx context.Context, b *brokerParams) (func(), error) {
	nc, err := nats.Connect(b.URL)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: b.Name, Subjects: []string{b.Name + ".>"},
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, MaxAge: time.Hour})
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: stream %s: %w", b.Name, err)
	}
	sub, err := nc.Subscribe(b.Name+".sub.*", func(m *nats.Msg) {
		k, ok := subOf(m.Subject)
		if !ok {
			k = -1
		}
		header := http.Header{}
		for name, vs := range m.Header {
			for _, v := range vs {
				header.Add(name, v)
			}
		}
		r.deliver(k, header, m.Data)
	})
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: subscribe: %w", err)
	}
	return func() {
		_ = sub.Unsubscribe()
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(dctx, b.Name)
		nc.Close()
	}, nil
}
