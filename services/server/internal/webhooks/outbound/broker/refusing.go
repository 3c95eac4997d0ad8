package broker

import (
	"context"
	"time"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// Refusing is a destination that cannot send, and answers every attempt
// with Retry and why.
type Refusing string

// Send answers Retry with the reason.
func (r Refusing) Send(context.Context, *outbound.Message, time.Time) outbound.Answer {
	return outbound.Answer{Kind: outbound.Retry, Err: string(r)}
}
