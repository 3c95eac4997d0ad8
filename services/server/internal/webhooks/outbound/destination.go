package outbound

import (
	"context"
	"errors"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Destination is where one subscription's messages go: an HTTP receiver
// or a broker. Send makes one attempt to hand m over, signed at ts, and
// says what came of it: Delivered only once the destination confirmed it
// (a 2xx, a broker's ack), Retry with the destination's reason in Err for
// anything else a later attempt may change (no answer, a nack, a
// connection cut, a missing stream), Gone when the destination says it is
// gone for good. The sender calls Send outside any database transaction,
// one message at a time in order for an ordered subscription, up to
// max_in_flight at once otherwise, and bounds each call with ctx.
type Destination interface {
	Send(ctx context.Context, m *Message, ts time.Time) Answer
}

// Signed is what a destination without HTTP headers carries beside a
// message's body so a receiver can verify it as a webhook's: the custom
// headers the store accepts, then Content-Type and the Standard Webhooks
// id, timestamp and signature (both secrets during a rotation's overlap),
// which no custom header can replace. Its error names no key.
func Signed(t *Target, m *Message, ts time.Time) (map[string]string, error) {
	sig, err := signature(t.Secret, m.ID, ts, m.Body)
	if err == nil && t.PreviousSecret != "" {
		var old string
		if old, err = signature(t.PreviousSecret, m.ID, ts, m.Body); err == nil {
			sig += " " + old
		}
	}
	if err != nil {
		return nil, errors.New("signing: " + err.Error())
	}
	h := make(map[string]string, len(t.Headers)+4)
	for name, v := range t.Headers {
		if canonical, ok := usableHeader(name, v); ok {
			h[canonical] = v
		}
	}
	h["Content-Type"] = "application/json"
	h[standardwebhooks.HeaderWebhookID] = m.ID
	h[standardwebhooks.HeaderWebhookTimestamp] = strconv.FormatInt(ts.Unix(), 10)
	h[standardwebhooks.HeaderWebhookSignature] = sig
	return h, nil
}
