package webhookpolicies

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	gosync "sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/bothy/bothy/services/server/internal/sync"
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

// stream is what one subscription's receiver path saw.
type stream struct {
	verifier *standardwebhooks.Webhook

	mu       gosync.Mutex
	started  []int64 // seqs in the order their requests came in
	answers  []answer
	badSig   int
	inFlight int
	top      int // most requests in flight at once
	// busy integrates inFlight over time since first: the average number
	// of requests in flight is busy / (last - first).
	busy        time.Duration
	first, last time.Time
}

// change moves inFlight by delta at now; s.mu is held.
func (s *stream) change(delta int, now time.Time) {
	if s.first.IsZero() {
		s.first = now
	} else {
		s.busy += time.Duration(s.inFlight) * now.Sub(s.last)
	}
	s.last = now
	s.inFlight += delta
	s.top = max(s.top, s.inFlight)
}

// receiver serves both subscriptions at /hook/{name} on 127.0.0.1: it
// verifies every request's signature with the Standard Webhooks library,
// holds it for latency and answers 204.
type receiver struct {
	srv     *httptest.Server
	latency time.Duration
	mu      gosync.Mutex
	streams map[string]*stream
}

func newReceiver(latency time.Duration) *receiver {
	r := &receiver{latency: latency, streams: map[string]*stream{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook/{name}", r.serve)
	r.srv = httptest.NewUnstartedServer(mux)
	r.srv.Config.MaxHeaderBytes = 64 << 10
	r.srv.Start()
	return r
}

func (r *receiver) close() { r.srv.Close() }

func (r *receiver) url(name string) string { return r.srv.URL + "/hook/" + name }

// add serves a subscription with its signing secret.
func (r *receiver) add(name, secret string) error {
	v, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.streams[name] = &stream{verifier: v}
	r.mu.Unlock()
	return nil
}

func (r *receiver) stream(name string) *stream {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.streams[name]
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	s := r.stream(req.PathValue("name"))
	if s == nil {
		http.NotFound(w, req)
		return
	}
	body, _ := io.ReadAll(req.Body)
	verr := s.verifier.Verify(body, req.Header)
	var env sync.Envelope
	_ = json.Unmarshal(body, &env)
	s.mu.Lock()
	s.started = append(s.started, env.Seq)
	if verr != nil {
		s.badSig++
	}
	s.change(1, time.Now())
	s.mu.Unlock()

	t := time.NewTimer(r.latency) // the receiver's own work
	select {
	case <-t.C:
	case <-req.Context().Done():
		t.Stop()
	}
	s.mu.Lock()
	s.change(-1, time.Now())
	if req.Context().Err() == nil {
		s.answers = append(s.answers, answer{seq: env.Seq, at: time.Now()})
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// snapshot copies what the stream saw.
func (s *stream) snapshot() (started []int64, answers []answer, badSig, top int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.started...), append([]answer(nil), s.answers...), s.badSig, s.top
}

// avgInFlight is the average number of requests in flight from the first
// request to the last answer.
func (s *stream) avgInFlight() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.After(s.first) {
		return 0
	}
	return float64(s.busy) / float64(s.last.Sub(s.first))
}

// awaitAll waits until every seq has an answer on the named stream, at most
// maxWait, or until the worker stops; it returns how long that took, or a
// negative duration if it did not happen.
func (r *receiver) awaitAll(ctx context.Context, name string, seqs []int64, maxWait time.Duration, done <-chan error) time.Duration {
	start := time.Now()
	want := make(map[int64]bool, len(seqs))
	for _, s := range seqs {
		want[s] = true
	}
	s := r.stream(name)
	seen := 0
	for {
		s.mu.Lock()
		for _, a := range s.answers[seen:] {
			delete(want, a.seq)
		}
		seen = len(s.answers)
		s.mu.Unlock()
		if len(want) == 0 {
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
