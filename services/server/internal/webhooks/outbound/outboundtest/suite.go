// Package outboundtest is the conformance suite of the destination port
// (outbound.Destination): every destination package runs Run against its
// real broker (or, for HTTP, a real receiver), through a CutProxy, so each
// kind shows the same guarantees: ordered arrival with valid signatures,
// Delivered only after the destination confirmed, Retry (never Delivered)
// for a connection cut mid-publish and no message lost that was answered
// Delivered, repeats dropped where the broker can drop them and counted
// where it cannot, a resend arriving again under its webhook-id (its own
// repeat dropped where the broker drops repeats), and a refusal answered
// Retry with the destination's reason.
package outboundtest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// Kit is what Run needs of one destination kind.
type Kit struct {
	// BrokerAddr is the host:port of the broker; each subtest puts a
	// CutProxy in front of it.
	BrokerAddr string
	// Setup makes a place on the broker of its own for one subtest (an
	// exchange and a queue bound to it, a stream, a key, a topic), removed
	// when the subtest ends, and returns the destination that sends there
	// through addr (a proxy's host:port) signed for target.
	Setup func(t *testing.T, addr string, target *outbound.Target) *Place
	// DropsRepeats: the broker drops a message sent again under the same
	// id; otherwise the suite counts the repeats a retry after a cut made.
	DropsRepeats bool
}

// Place is one subtest's place on the broker.
type Place struct {
	Dest outbound.Destination
	// Refusing sends where the broker refuses (a missing exchange or
	// stream); RefusalReason is part of the reason its answer must carry.
	Refusing      outbound.Destination
	RefusalReason string
	// Received returns what arrived so far, in arrival order.
	Received func() []Arrival
}

// Arrival is one message as a consumer of the place read it.
type Arrival struct {
	// Headers are the message's headers, Webhook-Id among them.
	Headers map[string]string
	Body    []byte
}

// ID is the arrival's webhook-id.
func (a *Arrival) ID() string { return header(a.Headers, standardwebhooks.HeaderWebhookID) }

// waitFor bounds every wait of the suite.
const waitFor = 20 * time.Second

// Run runs the suite against kit.
func Run(t *testing.T, kit *Kit) {
	t.Run("ArrivesInOrderSigned", func(t *testing.T) { testOrder(t, kit) })
	t.Run("DeliveredOnlyAfterConfirmationAndRetryOnCut", func(t *testing.T) { testCut(t, kit) })
	t.Run("RefusalIsRetryWithReason", func(t *testing.T) { testRefusal(t, kit) })
	t.Run("ResendArrivesAgain", func(t *testing.T) { testResend(t, kit) })
}

// setup starts a proxy and a place for one subtest.
func setup(t *testing.T, kit *Kit) (*CutProxy, *Place, *outbound.Target) {
	t.Helper()
	target := &outbound.Target{Secret: "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Headers: map[string]string{"X-Tenant": "t1"}}
	proxy := NewCutProxy(t, kit.BrokerAddr)
	place := kit.Setup(t, proxy.Addr(), target)
	t.Cleanup(proxy.Cut) // before the place's own cleanup, which a hold would keep waiting
	return proxy, place, target
}

// Message returns the i-th test message of a run: an envelope-like body
// under a fresh id, on space and type.
func Message(space string, seq int64) *outbound.Message {
	id := uuid.New().String()
	body := fmt.Sprintf(`{"id":%q,"seq":%d,"space":%q,"type":"item.created","data":{"n":%d}}`, id, seq, space, seq)
	return &outbound.Message{ID: id, Body: []byte(body), Space: space, Type: "item.created", Seq: seq, LastSeq: seq}
}

func testOrder(t *testing.T, kit *Kit) {
	_, place, target := setup(t, kit)
	const n = 20
	var sent []*outbound.Message
	for i := range n {
		m := Message("conformance", int64(i+1))
		a := place.Dest.Send(ctx(t), m, time.Now())
		require.Equal(t, outbound.Delivered, a.Kind, "send %d: %s", i, a.Err)
		sent = append(sent, m)
	}
	got := waitArrivals(t, place, n)
	require.Len(t, got, n)
	for i, a := range got {
		require.Equal(t, sent[i].ID, a.ID(), "arrival %d out of order", i)
		require.Equal(t, string(sent[i].Body), string(a.Body))
		requireSigned(t, target, &a)
		require.Equal(t, "t1", header(a.Headers, "X-Tenant"))
	}
}

// testCut holds the broker's replies while a message is published, sees
// it reach the broker with the send still unanswered, cuts the
// connection and wants Retry; then sends it again and more after it and
// wants each answered Delivered to have arrived, repeats dropped or
// counted.
func testCut(t *testing.T, kit *Kit) {
	proxy, place, _ := setup(t, kit)
	first := Message("conformance", 1)
	sendUntilDelivered(t, place.Dest, first) // the connection is up
	proxy.Hold()
	cut := Message("conformance", 2)
	answered := make(chan outbound.Answer, 1)
	go func() { answered <- place.Dest.Send(ctx(t), cut, time.Now()) }()
	waitArrivals(t, place, 2) // the broker has it
	select {
	case a := <-answered:
		t.Fatalf("answered %s (%s) while the broker's confirmation was held back", a.Kind, a.Err)
	default:
	}
	proxy.Cut()
	a := <-answered
	require.Equal(t, outbound.Retry, a.Kind, "a cut mid-publish must be Retry")
	require.NotEmpty(t, a.Err)

	delivered := []*outbound.Message{first, cut}
	sendUntilDelivered(t, place.Dest, cut)
	for i := range 5 {
		m := Message("conformance", int64(3+i))
		sendUntilDelivered(t, place.Dest, m)
		delivered = append(delivered, m)
	}
	want := len(delivered)
	if !kit.DropsRepeats {
		want++ // cut arrives twice
	}
	got := waitArrivals(t, place, want)
	counts := map[string]int{}
	for _, a := range got {
		counts[a.ID()]++
	}
	for _, m := range delivered {
		require.NotZero(t, counts[m.ID], "message %d was answered Delivered but the broker does not have it", m.Seq)
	}
	repeats := len(got) - len(counts)
	if kit.DropsRepeats {
		require.Zero(t, repeats, "the broker should have dropped the repeat")
	} else {
		require.Equal(t, 1, repeats, "the one message sent again after the cut arrives twice")
		t.Logf("repeats counted: %d (the broker cannot drop them; consumers deduplicate by webhook-id)", repeats)
	}
}

// testResend sends two messages, then the first again as its owner's
// resend (Resent set), twice as an attempt again after a lost answer
// would, then a third message. The resend arrives again, signed under the
// first's webhook-id; its repeat is dropped where the broker drops
// repeats and counted where it cannot.
func testResend(t *testing.T, kit *Kit) {
	_, place, target := setup(t, kit)
	first, second, third := Message("conformance", 1), Message("conformance", 2), Message("conformance", 3)
	sendUntilDelivered(t, place.Dest, first)
	sendUntilDelivered(t, place.Dest, second)
	resent := *first
	resent.Resent = time.Now()
	for i := range 2 {
		a := place.Dest.Send(ctx(t), &resent, time.Now())
		require.Equal(t, outbound.Delivered, a.Kind, "resend, sending %d: %s", i+1, a.Err)
	}
	sendUntilDelivered(t, place.Dest, third)
	want := []*outbound.Message{first, second, &resent, &resent, third}
	if kit.DropsRepeats {
		want = slices.Delete(want, 3, 4)
	}
	got := waitArrivals(t, place, len(want))
	ids, wantIDs := make([]string, len(got)), make([]string, len(want))
	for i := range got {
		ids[i] = got[i].ID()
		requireSigned(t, target, &got[i])
	}
	for i, m := range want {
		wantIDs[i] = m.ID
	}
	require.Equal(t, wantIDs, ids, "the resend arrives again under the message's id")
	require.Equal(t, string(first.Body), string(got[2].Body))
}

func testRefusal(t *testing.T, kit *Kit) {
	_, place, _ := setup(t, kit)
	a := place.Refusing.Send(ctx(t), Message("conformance", 1), time.Now())
	require.Equal(t, outbound.Retry, a.Kind, "a refusal must be Retry, was answered %s", a.Kind)
	require.Contains(t, a.Err, place.RefusalReason)
}

// sendUntilDelivered sends m until it is Delivered, as the engine's
// retries would, within waitFor.
func sendUntilDelivered(t *testing.T, d outbound.Destination, m *outbound.Message) {
	t.Helper()
	testwait.Until(t, waitFor, func() bool {
		return d.Send(ctx(t), m, time.Now()).Kind == outbound.Delivered
	}, "message %d answered Delivered", m.Seq)
}

// waitArrivals waits until at least n messages arrived and returns them.
func waitArrivals(t *testing.T, p *Place, n int) []Arrival {
	t.Helper()
	var got []Arrival
	testwait.Until(t, waitFor, func() bool {
		got = p.Received()
		return len(got) >= n
	}, "%d messages to arrive", n)
	return got
}

// ctx bounds one send.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), waitFor)
	t.Cleanup(cancel)
	return c
}

// requireSigned verifies a's signature as a webhook receiver would.
func requireSigned(t *testing.T, target *outbound.Target, a *Arrival) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(target.Secret)
	require.NoError(t, err)
	h := http.Header{}
	for k, v := range a.Headers {
		h.Set(k, v)
	}
	require.NoError(t, wh.Verify(a.Body, h), "signature of %s", a.ID())
}

// header reads a header by name, whatever its case.
func header(h map[string]string, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}
