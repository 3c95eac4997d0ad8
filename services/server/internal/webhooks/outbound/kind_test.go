package outbound_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// untimed is a destination that answers without timing its attempt, as
// the brokers' do, once its attempt has taken at least a millisecond.
type untimed struct{}

func (untimed) Send(context.Context, *outbound.Message, time.Time) outbound.Answer {
	deadline := time.Now().Add(time.Millisecond)
	for time.Now().Before(deadline) {
	}
	return outbound.Answer{Kind: outbound.Delivered}
}

type untimedOpener struct{}

func (untimedOpener) Destination(*outbound.Target) (outbound.Destination, error) {
	return untimed{}, nil
}
func (untimedOpener) Close() {}

// TestDestinations_AnAnswerCarriesTheTimeItsAttemptTook: a kind that does
// not time its attempts gets the time Send took, for the attempt record
// and the duration metric.
func TestDestinations_AnAnswerCarriesTheTimeItsAttemptTook(t *testing.T) {
	kinds := outbound.Kinds{"untimed": {Open: func(*outbound.OpenParams) outbound.Opener { return untimedOpener{} }}}
	dests := kinds.Open(&outbound.OpenParams{})
	t.Cleanup(dests.Close)
	d, err := dests.For(&outbound.Target{Kind: "untimed"})
	require.NoError(t, err)
	a := d.Send(context.Background(), &outbound.Message{}, time.Now())
	require.Equal(t, outbound.Delivered, a.Kind)
	require.Positive(t, a.Duration)
}
