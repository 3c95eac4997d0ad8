package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// Attempt bounds one Send in the tests.
const Attempt = 5 * time.Second

// Send makes one attempt of m, bounded by Attempt.
func Send(d outbound.Destination, m *outbound.Message) outbound.Answer {
	ctx, cancel := context.WithTimeout(context.Background(), Attempt)
	defer cancel()
	return d.Send(ctx, m, time.Now())
}

// Deliver sends m as an ordered sender does, again after each Retry,
// until it is Delivered; it fails tb when that has not happened within a
// minute. It returns the Retry answers before the delivery, and the
// delivery's answer.
func Deliver(tb testing.TB, d outbound.Destination, m *outbound.Message) ([]outbound.Answer, outbound.Answer) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	var retries []outbound.Answer
	for {
		a := Send(d, m)
		if a.Kind == outbound.Delivered {
			return retries, a
		}
		retries = append(retries, a)
		if time.Now().After(deadline) {
			tb.Fatalf("brokertest: message %s not delivered within a minute; last answer %s: %s", m.ID, a.Kind, a.Err)
		}
		<-time.After(50 * time.Millisecond) // a sender's wait between attempts, not a wait for an event
	}
}
