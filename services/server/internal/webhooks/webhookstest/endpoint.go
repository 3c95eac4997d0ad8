package webhookstest

import (
	"errors"
	"net/http"
	"slices"
	gosync "sync"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Endpoint is one path of a receiver: its secret, rule and arrivals.
type Endpoint struct {
	r        *Receiver
	mu       gosync.Mutex
	name     string
	verifier *standardwebhooks.Webhook
	rule     Rule
	release  chan struct{}
	arrivals []*Arrival
	attempts map[int64]int
	events   map[uuid.UUID]*eventState
	acked    int64 // the highest seq answered 2xx
	now, top int   // requests held now, and the most at once
	badSig   int
}

// eventState is what an endpoint knows of one event.
type eventState struct {
	delivered bool // answered 2xx
	inFlight  int  // requests with it not answered yet
}

// ErrNoSignature is a request's SigErr when its endpoint has a secret and
// the request carries no signature at all.
var ErrNoSignature = errors.New("webhookstest: no webhook-signature header")

// Name is the endpoint's name.
func (e *Endpoint) Name() string { return e.name }

// SetSecret makes the endpoint verify every request from now on with the
// Standard Webhooks library under secret ("": no verification).
func (e *Endpoint) SetSecret(secret string) error {
	var v *standardwebhooks.Webhook
	if secret != "" {
		var err error
		if v, err = standardwebhooks.NewWebhook(secret); err != nil {
			return err
		}
	}
	e.mu.Lock()
	e.verifier = v
	e.mu.Unlock()
	return nil
}

// SetRule makes the endpoint answer by rule from now on (nil: 200).
func (e *Endpoint) SetRule(rule Rule) {
	e.mu.Lock()
	e.rule = rule
	e.mu.Unlock()
}

// Release answers every request the endpoint holds by a Hang; later hangs
// hold again.
func (e *Endpoint) Release() {
	e.mu.Lock()
	close(e.release)
	e.release = make(chan struct{})
	e.mu.Unlock()
}

// arrive records a request; e.mu is held.
func (e *Endpoint) arrive(h http.Header, body []byte, at time.Time) *Arrival {
	a := &Arrival{Endpoint: e.name, N: len(e.arrivals) + 1, ID: h.Get("webhook-id"), At: at}
	a.Events, a.Batch, _ = envelopes(body)
	if e.verifier != nil {
		switch {
		case h.Get("webhook-signature") == "":
			a.SigErr = ErrNoSignature
		default:
			a.SigErr = e.verifier.Verify(body, h)
		}
		a.Verified = a.SigErr == nil
		if !a.Verified {
			e.badSig++
		}
	}
	if len(a.Events) > 0 {
		a.Seq = a.Events[0].Seq
		e.attempts[a.Seq]++
		a.Attempt = e.attempts[a.Seq]
	}
	for _, ev := range a.Events {
		st := e.events[ev.ID]
		if st == nil {
			st = &eventState{}
			e.events[ev.ID] = st
		}
		a.Repeat = a.Repeat || st.delivered
		a.Overlap = a.Overlap || st.inFlight > 0
		a.OutOfOrder = a.OutOfOrder || ev.Seq < e.acked
		st.inFlight++
	}
	if e.r.opts.Lean {
		for i := range a.Events {
			a.Events[i].Data = nil
		}
	} else {
		a.Header, a.Body = h.Clone(), body
	}
	e.now++
	e.top = max(e.top, e.now)
	e.arrivals = append(e.arrivals, a)
	return a
}

// hold holds the request as ans says, and says whether it is to be
// answered (false: the sender gave up first).
func (e *Endpoint) hold(req *http.Request, ans *Answer, release <-chan struct{}) bool {
	var timeout <-chan time.Time
	switch {
	case ans.Hang:
	case ans.Delay > 0:
		t := time.NewTimer(ans.Delay)
		defer t.Stop()
		timeout = t.C
	default:
		return true
	}
	select {
	case <-req.Context().Done():
		return false
	case <-release:
	case <-e.r.closed:
	case <-timeout:
	}
	return req.Context().Err() == nil
}

// answer records a's answer; e.mu is held.
func (e *Endpoint) answer(a *Arrival, status int, at time.Time) {
	a.Status, a.Answered = status, at
	e.now--
	for _, ev := range a.Events {
		st := e.events[ev.ID]
		st.inFlight--
		if a.OK() {
			st.delivered = true
			e.acked = max(e.acked, ev.Seq)
		}
	}
}

// Arrivals copies the endpoint's arrivals, in the order they came.
func (e *Endpoint) Arrivals() []Arrival {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Arrival, len(e.arrivals))
	for i, a := range e.arrivals {
		out[i] = *a
	}
	return out
}

// Count is how many requests arrived.
func (e *Endpoint) Count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.arrivals)
}

// Seqs are the seqs of every arrival's events, in the order they came.
func (e *Endpoint) Seqs() []int64 { return Seqs(e.Arrivals()) }

// Delivered are the seqs of the events answered 2xx, each once, in the
// order of their first such answer's arrival.
func (e *Endpoint) Delivered() []int64 {
	var out []int64
	seen := map[int64]bool{}
	for _, a := range e.Arrivals() {
		if !a.OK() {
			continue
		}
		for _, s := range a.Seqs() {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// Repeats are the seqs of the arrivals marked Repeat, in order.
func (e *Endpoint) Repeats() []int64 { return e.marked(func(a *Arrival) bool { return a.Repeat }) }

// Overlaps are the seqs of the arrivals marked Overlap, in order.
func (e *Endpoint) Overlaps() []int64 { return e.marked(func(a *Arrival) bool { return a.Overlap }) }

// OutOfOrder are the seqs of the arrivals marked OutOfOrder, in order.
func (e *Endpoint) OutOfOrder() []int64 {
	return e.marked(func(a *Arrival) bool { return a.OutOfOrder })
}

func (e *Endpoint) marked(f func(*Arrival) bool) []int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []int64
	for _, a := range e.arrivals {
		if f(a) {
			out = append(out, a.Seq)
		}
	}
	return out
}

// Distinct is how many distinct events arrived.
func (e *Endpoint) Distinct() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.events)
}

// BadSignatures counts the requests whose signature did not verify.
func (e *Endpoint) BadSignatures() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.badSig
}

// InFlight is how many requests the endpoint holds now, and the most it
// held at once.
func (e *Endpoint) InFlight() (now, top int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now, e.top
}

// Seqs are the seqs of the arrivals' events, in order.
func Seqs(as []Arrival) []int64 {
	var out []int64
	for i := range as {
		out = append(out, as[i].Seqs()...)
	}
	return slices.Clip(out)
}
