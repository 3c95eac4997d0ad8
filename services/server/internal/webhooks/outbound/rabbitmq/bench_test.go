package rabbitmq_test

import (
	"testing"
	"time"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/outboundtest"
)

// BenchmarkDestination_Send is one ordered sender's cost per message: a
// persistent, mandatory publish and its confirmation, one at a time, to an
// exchange with one queue bound.
func BenchmarkDestination_Send(b *testing.B) {
	broker := brokerURL(b)
	p := newPlace(b, broker)
	c := config(b, `{"url":`+quote(broker)+`,"exchange":`+quote(p.exchange)+`}`)
	d := newPool(b).Destination(c, &outbound.Target{Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	m := outboundtest.Message("bench", 1)
	for b.Loop() {
		if a := d.Send(b.Context(), m, time.Now()); a.Kind != outbound.Delivered {
			b.Fatal(a.Err)
		}
	}
}
