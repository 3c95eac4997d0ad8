package redisstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/brokertest"
)

// resendOf is m resent by its owner at.
func resendOf(m *outbound.Message, at time.Time) *outbound.Message {
	r := *m
	r.Resent = at
	return &r
}

// requireEntries requires key's stream to hold, in order, entries with
// the ids and resent fields of want ("" for an entry without one).
func (b *bundle) requireEntries(t *testing.T, key string, want ...string) {
	t.Helper()
	var got []string
	for _, e := range b.entries(t, key) {
		resent, _ := e.Values["resent"].(string)
		got = append(got, fmt.Sprintf("%s %v %s", e.ID, e.Values["id"], resent))
	}
	require.Equal(t, want, got)
}

func entry(id string, m *outbound.Message) string {
	if m.Resent.IsZero() {
		return fmt.Sprintf("%s %s ", id, m.ID)
	}
	return fmt.Sprintf("%s %s %s", id, m.ID, m.Resent.UTC().Format(time.RFC3339Nano))
}

func TestDestination_SendResend(t *testing.T) {
	t.Parallel()

	t.Run("GoesAfterTheLastEntryAndItsRepeatBehindLaterEntriesIsDropped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.destination(t, b.addr, brokertest.Target(), "")
		const later = 40 // more than a page of the search back
		msgs := brokertest.Messages(t, "acme", "order.created", 1, 2+later)
		for _, m := range msgs[:2] {
			brokertest.Deliver(t, d, m)
		}
		r := resendOf(msgs[0], time.Now())
		_, a := brokertest.Deliver(t, d, r)
		require.Contains(t, a.Excerpt, "entry 2-1")
		// The rest of a batch went out after it before a crash; the
		// resend is attempted again.
		want := []string{entry("1-0", msgs[0]), entry("2-0", msgs[1]), entry("2-1", r)}
		for i, m := range msgs[2:] {
			brokertest.Deliver(t, d, m)
			want = append(want, entry(fmt.Sprintf("%d-0", i+3), m))
		}
		a = brokertest.Send(d, r)
		require.Equal(t, outbound.Delivered, a.Kind, a.Err)
		require.Contains(t, a.Excerpt, "a repeat: entry 2-1")
		again := resendOf(msgs[0], r.Resent.Add(time.Second))
		brokertest.Deliver(t, d, again)
		b.requireEntries(t, b.key("acme"), append(want, entry(fmt.Sprintf("%d-1", 2+later), again))...)
	})

	t.Run("OfAMessageTheStreamNeverHadGoesAtItsSeq", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.destination(t, b.addr, brokertest.Target(), "")
		msgs := brokertest.Messages(t, "acme", "order.created", 1, 3)
		brokertest.Deliver(t, d, msgs[0])
		r := resendOf(msgs[1], time.Now()) // seq 2 was dead, never added
		brokertest.Deliver(t, d, r)
		brokertest.Deliver(t, d, msgs[2])
		b.requireEntries(t, b.key("acme"), entry("1-0", msgs[0]), entry("2-0", r), entry("3-0", msgs[2]))
	})

	t.Run("EntryHoldsNoOtherSeqs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		d := b.destination(t, b.addr, brokertest.Target(), "")
		msgs := brokertest.Messages(t, "acme", "order.created", 2, 2) // seqs 2 and 3
		brokertest.Deliver(t, d, msgs[1])
		brokertest.Deliver(t, d, resendOf(msgs[0], time.Now())) // 3-1, its seq field 2
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, b.client.XDel(ctx, b.key("acme"), "3-0").Err())
		a := brokertest.Send(d, msgs[1])
		require.Equal(t, outbound.Retry, a.Kind, "seq 3 was deleted; the resend of seq 2 after it does not hold it")
		require.Contains(t, a.Err, "already past entry id 3-0")
	})
}
