package jetstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/brokertest"
	bjs "github.com/bothy/bothy/services/server/internal/webhooks/outbound/jetstream"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/outboundtest"
)

func TestJetStream_Conformance(t *testing.T) {
	t.Parallel()
	addr := brokertest.NATS.Addr(t)
	outboundtest.Run(t, &outboundtest.Kit{
		BrokerAddr:   addr,
		DropsRepeats: true,
		Setup: func(t *testing.T, through string, target *outbound.Target) *outboundtest.Place {
			b := setup(t)
			pool := bjs.NewPool(brokertest.Policy, brokertest.Log)
			if brokertest.WithoutConfirms() {
				pool.SkipConfirms()
			}
			t.Cleanup(pool.Close)
			dest := func(subject string) outbound.Destination {
				c, err := bjs.ParseConfig(json.RawMessage(fmt.Sprintf(`{"url":"nats://%s","subject":%q}`, through, subject)))
				require.NoError(t, err)
				return pool.Destination(c, target)
			}
			return &outboundtest.Place{
				Dest:          dest(b.prefix + ".{space}.{type}"),
				Refusing:      dest(brokertest.Name("nostream") + ".{type}"),
				RefusalReason: "no stream takes subject",
				Received:      func() []outboundtest.Arrival { return b.arrivals(t) },
			}
		},
	})
}

// arrivals are the stream's messages, in stream order.
func (b *bundle) arrivals(t *testing.T) []outboundtest.Arrival {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := b.stream.Info(ctx)
	require.NoError(t, err)
	out := make([]outboundtest.Arrival, 0, info.State.Msgs)
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := b.stream.GetMsg(ctx, seq)
		require.NoError(t, err)
		out = append(out, outboundtest.Arrival{Headers: flat(m.Header), Body: m.Data})
	}
	return out
}

func flat(h nats.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k := range h {
		out[k] = h.Get(k)
	}
	return out
}

// TestJetStream_ConformanceFailsWithoutConfirms runs the conformance suite
// in a child process whose pool publishes without waiting for the PubAck,
// and wants it to fail where a send is answered before the stream
// confirmed: the cut test and the refusal (no stream answered delivered).
func TestJetStream_ConformanceFailsWithoutConfirms(t *testing.T) {
	t.Parallel()
	brokertest.NATS.Addr(t)
	brokertest.RequireFailsWithoutConfirms(t, "TestJetStream_Conformance",
		"--- FAIL: TestJetStream_Conformance/DeliveredOnlyAfterConfirmationAndRetryOnCut",
		"while the broker's confirmation was held back",
		"--- FAIL: TestJetStream_Conformance/RefusalIsRetryWithReason")
}
