package webhookstest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	gosync "sync"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// MaxBody bounds the body the receiver reads.
const MaxBody = 16 << 20

// Arrival is one request an endpoint received.
type Arrival struct {
	// Endpoint is the endpoint's name; N the arrival's place among its
	// arrivals, from 1.
	Endpoint string
	N        int
	// ID is the webhook-id header.
	ID     string
	Header http.Header
	Body   []byte
	// Events is the body's envelope, or a batch's (Batch); nil if the
	// body is neither (a shaped body, say).
	Events []sync.Envelope
	Batch  bool
	// Seq is the first event's seq (0 without events); Attempt counts the
	// endpoint's requests whose first event is that seq, this one
	// included.
	Seq     int64
	Attempt int
	// SigErr is why the signature did not verify; nil if it did or the
	// endpoint has no secret. Verified: it verified under the secret.
	SigErr   error
	Verified bool
	// Repeat: one of the events had been answered 2xx at the endpoint
	// already. Overlap: one was in another request still unanswered.
	// OutOfOrder: one has a lower seq than an event answered 2xx before.
	Repeat, Overlap, OutOfOrder bool
	// Status is what the endpoint answered; 0 while it holds the request,
	// and if the sender gave up first.
	Status int
	// At is when the request came in; Answered when it was answered or
	// given up (zero while held).
	At, Answered time.Time
}

// Seqs are the seqs of the arrival's events.
func (a *Arrival) Seqs() []int64 {
	out := make([]int64, len(a.Events))
	for i, e := range a.Events {
		out[i] = e.Seq
	}
	return out
}

// OK says whether the endpoint answered 2xx.
func (a *Arrival) OK() bool { return a.Status >= 200 && a.Status < 300 }

// Options adjust a Receiver; the zero value keeps everything.
type Options struct {
	// Lean keeps no headers, bodies or event data: for load tools.
	Lean bool
	// OnArrival, if set, is called with each arrival once it is answered
	// or given up, outside the receiver's lock.
	OnArrival func(Arrival)
}

// Receiver is an http.Handler serving endpoints at /hook/{name} ("/hook"
// and "/" are the endpoint ""); any other path is an endpoint too, named
// by the path without its leading slash. An endpoint is made by its first
// use.
type Receiver struct {
	opts   Options
	mu     gosync.Mutex
	eps    map[string]*Endpoint
	order  []string
	def    Rule // the rule of endpoints made from now on
	closed chan struct{}
	once   gosync.Once
}

// NewReceiver returns a receiver; o may be nil.
func NewReceiver(o *Options) *Receiver {
	r := &Receiver{eps: map[string]*Endpoint{}, closed: make(chan struct{})}
	if o != nil {
		r.opts = *o
	}
	return r
}

// Endpoint returns the endpoint name, made if it is new.
func (r *Receiver) Endpoint(name string) *Endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.endpoint(name)
}

// Endpoints lists the endpoints' names in the order they were made.
func (r *Receiver) Endpoints() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

func (r *Receiver) endpoint(name string) *Endpoint {
	ep := r.eps[name]
	if ep == nil {
		ep = &Endpoint{r: r, name: name, rule: r.def, release: make(chan struct{}), attempts: map[int64]int{}, events: map[uuid.UUID]*eventState{}}
		r.eps[name] = ep
		r.order = append(r.order, name)
	}
	return ep
}

// SetDefaultRule makes the endpoints made from now on answer by rule
// until their own SetRule.
func (r *Receiver) SetDefaultRule(rule Rule) {
	r.mu.Lock()
	r.def = rule
	r.mu.Unlock()
}

// Path is the path of endpoint name.
func Path(name string) string {
	if name == "" {
		return "/hook"
	}
	return "/hook/" + name
}

// endpointName is the name of the endpoint at path.
func endpointName(path string) string {
	if rest, ok := strings.CutPrefix(path, "/hook"); ok && (rest == "" || rest[0] == '/') {
		path = rest
	}
	return strings.TrimPrefix(path, "/")
}

// Close releases every held request, now and later; it does not stop a
// server serving r.
func (r *Receiver) Close() { r.once.Do(func() { close(r.closed) }) }

// ServeHTTP records the request at its endpoint and answers it by the
// endpoint's rule.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	name := endpointName(req.URL.Path)
	body, err := io.ReadAll(io.LimitReader(req.Body, MaxBody))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	ep := r.Endpoint(name)
	ep.mu.Lock()
	a := ep.arrive(req.Header, body, time.Now())
	ans := Answer{}
	if ep.rule != nil {
		ans = ep.rule(a)
	}
	release := ep.release
	ep.mu.Unlock()

	answered := ep.hold(req, &ans, release)
	ep.mu.Lock()
	status := 0
	if answered {
		status = ans.status()
	}
	ep.answer(a, status, time.Now())
	done := *a
	ep.mu.Unlock()
	if r.opts.OnArrival != nil {
		r.opts.OnArrival(done)
	}
	for k, v := range ans.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(ans.status())
	_, _ = io.WriteString(w, cmp.Or(ans.Body, "ok"))
}

// Accept records a message that came another way than HTTP (a broker's)
// at endpoint name, answered 200 at once, and returns its arrival.
func (r *Receiver) Accept(name string, header http.Header, body []byte) Arrival {
	now := time.Now()
	ep := r.Endpoint(name)
	ep.mu.Lock()
	a := ep.arrive(header, body, now)
	ep.answer(a, http.StatusOK, now)
	done := *a
	ep.mu.Unlock()
	if r.opts.OnArrival != nil {
		r.opts.OnArrival(done)
	}
	return done
}

// envelopes reads a body: one envelope, or a JSON array of them.
func envelopes(body []byte) (envs []sync.Envelope, batch bool, err error) {
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) > 0 && b[0] == '[' {
		if err := json.Unmarshal(b, &envs); err != nil {
			return nil, true, err
		}
		if len(envs) == 0 {
			return nil, true, errors.New("empty batch")
		}
		return envs, true, nil
	}
	var env sync.Envelope
	if err := json.Unmarshal(body, &env); err != nil || env.ID == uuid.Nil {
		return nil, false, errors.New("not an envelope")
	}
	return []sync.Envelope{env}, false, nil
}
