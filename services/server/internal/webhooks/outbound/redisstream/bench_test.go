package redisstream_test

import (
	"testing"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/brokertest"
)

// BenchmarkDestination_Send is one ordered sender's cost per message on
// the machine's server: one XADD and its answer at a time.
func BenchmarkDestination_Send(b *testing.B) {
	bb := setup(b)
	d := bb.destination(b, bb.addr, brokertest.Target(), "")
	msgs := brokertest.Messages(b, "acme", "order.created", 1, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if a := brokertest.Send(d, msgs[i]); a.Kind != outbound.Delivered {
			b.Fatal(a.Err)
		}
	}
}
