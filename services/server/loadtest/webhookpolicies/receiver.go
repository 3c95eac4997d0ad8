package webhookpolicies

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
)

// The receiver paths of the two subscriptions.
const (
	unordered = "unordered"
	ordered   = "ordered"
)

// answer is one request the receiver answered with 204.
type answer struct {
	seq int64
	at  time.Time
}

// receiver serves both subscriptions on 127.0.0.1 with the webhook test
// kit: it verifies every request's signature with the Standard Webhooks
// library, holds it for latency and answers 204.
type receiver struct {
	srv     *webhookstest.Server
	latency time.Duration
}

func newReceiver(latency time.Duration) *receiver {
	return &receiver{srv: webhookstest.NewServer(&webhookstest.Options{Lean: true}), latency: latency}
}

func (r *receiver) close() { r.srv.Close() }

func (r *receiver) url(name string) string { return r.srv.URL(name) }

// add serves a subscription with its signing secret.
func (r *receiver) add(name, secret string) error {
	ep := r.srv.Endpoint(name)
	// The hold is the receiver's own work.
	ep.SetRule(webhookstest.Always(webhookstest.Answer{Status: http.StatusNoContent, Delay: r.latency}))
	return ep.SetSecret(secret)
}

// stream is what one subscription's endpoint saw.
type stream struct{ ep *webhookstest.Endpoint }

func (r *receiver) stream(name string) stream { return stream{r.srv.Endpoint(name)} }

// snapshot copies what the stream saw: the seqs in the order their
// requests came in, the answers, the bad signatures and the most requests
// in flight at once.
func (s stream) snapshot() (started []int64, answers []answer, badSig, top int) {
	for _, a := range s.ep.Arrivals() {
		started = append(started, a.Seq)
		if a.OK() {
			answers = append(answers, answer{seq: a.Seq, at: a.Answered})
		}
	}
	_, top = s.ep.InFlight()
	return started, answers, s.ep.BadSignatures(), top
}

// avgInFlight is the average number of requests in flight from the first
// request to the last answer.
func (s stream) avgInFlight() float64 {
	var busy time.Duration
	var first, last time.Time
	for _, a := range s.ep.Arrivals() {
		if a.Answered.IsZero() {
			continue
		}
		busy += a.Answered.Sub(a.At)
		if first.IsZero() || a.At.Before(first) {
			first = a.At
		}
		if a.Answered.After(last) {
			last = a.Answered
		}
	}
	if !last.After(first) {
		return 0
	}
	return float64(busy) / float64(last.Sub(first))
}

// awaitAll waits until every seq has an answer on the named stream, at most
// maxWait, or until the worker stops; it returns how long that took, or a
// negative duration if it did not happen.
func (r *receiver) awaitAll(ctx context.Context, name string, seqs []int64, maxWait time.Duration, done <-chan error) time.Duration {
	start := time.Now()
	ep := r.srv.Endpoint(name)
	for {
		got := map[int64]bool{}
		for _, s := range ep.Delivered() {
			got[s] = true
		}
		if !slices.ContainsFunc(seqs, func(s int64) bool { return !got[s] }) {
			return time.Since(start)
		}
		if time.Since(start) > maxWait {
			return -1
		}
		select {
		case <-ctx.Done():
			return -1
		case <-done:
			return -1
		case <-time.After(20 * time.Millisecond):
		}
	}
}
