package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/bothy/bothy/services/server/internal/testwait"
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
	var retries []outbound.Answer
	var a outbound.Answer
	testwait.Until(tb, time.Minute, func() bool {
		if a = Send(d, m); a.Kind == outbound.Delivered {
			return true
		}
		retries = append(retries, a)
		return false
	}, "message %s delivered (last answer: %v)", m.ID, lastAnswer{&a})
	return retries, a
}

// lastAnswer prints an answer as it is when printed, not when passed.
type lastAnswer struct{ a *outbound.Answer }

func (l lastAnswer) String() string { return l.a.Kind.String() + ": " + l.a.Err }
