package webhookhandoff

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	gosync "sync"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// receiverRole is the child process that receives the webhooks, so that
// its CPU time is its own.
const receiverRole = "webhook_handoff.receiver"

// receiverParams are the receiver's endpoints: subscription k is served
// at /hook/k.
type receiverParams struct {
	Endpoints []endpointParams `json:"endpoints"`
	// Broker, if set, is where the subscriptions publish instead: the
	// receiver consumes a queue per subscription there.
	Broker *brokerParams `json:"broker,omitempty"`
}

type endpointParams struct {
	Secret  string `json:"secret"`
	Ordered bool   `json:"ordered"`
	// Space and Type are what the subscription filters: an event of
	// another arriving there is unexpected.
	Space string `json:"space"`
	Type  string `json:"type"`
}

// receiverHello is the receiver's first line: where it listens.
type receiverHello struct {
	URL string `json:"url"`
}

// expectation says which deliveries count: those of events with a seq in
// (After, Upto], Counts[k] of them at subscription k.
type expectation struct {
	After  int64 `json:"after"`
	Upto   int64 `json:"upto"`
	Counts []int `json:"counts"`
}

// receiverStats are the receiver's counts.
type receiverStats struct {
	// Missing is how many expected deliveries have not arrived; Expected
	// how many arrived.
	Missing  int `json:"missing"`
	Expected int `json:"expected"`
	// Received counts distinct deliveries (subscription, event id) since
	// the start, expected or not; Requests every request.
	Received int `json:"received"`
	Requests int `json:"requests"`
	// Duplicates counts an event arriving again at a subscription;
	// OrderViolations an event arriving at an ordered subscription after
	// one with a higher seq; BadSignatures requests whose signature (or
	// body) failed; Unexpected events of another space or type than the
	// subscription's.
	Duplicates      int `json:"duplicates"`
	OrderViolations int `json:"order_violations"`
	BadSignatures   int `json:"bad_signatures"`
	Unexpected      int `json:"unexpected"`
	// LastArrival is when the last delivery arrived.
	LastArrival time.Time `json:"last_arrival"`
}

// arrivalRecord is one expected delivery's arrival, as /ctl/arrivals
// lists them.
type arrivalRecord struct {
	Sub int       `json:"sub"`
	ID  uuid.UUID `json:"id"`
	Seq int64     `json:"seq"`
	At  time.Time `json:"at"`
}

type arrival struct {
	seq int64
	at  time.Time
	// stray: of another space or type than the subscription's.
	stray bool
}

// endpoint is one subscription's receiver path.
type endpoint struct {
	ordered    bool
	space, typ string
	lastSeq    int64 // highest seq received
	seen       map[uuid.UUID]arrival
	expected   int // distinct arrivals the expectation counts
}

// receiver serves every subscription at /hook/{index} with the webhook
// test kit, which verifies each request's signature with the Standard
// Webhooks library and answers 204 at once; a body is one event's envelope
// or a JSON array of them, and each envelope is a delivery, received when
// the signature verified.
type receiver struct {
	kit       *webhookstest.Receiver
	mu        gosync.Mutex
	endpoints []*endpoint
	want      expectation
	stats     receiverStats
	complete  chan struct{} // closed once nothing expected is missing
}

// runReceiver is the receiver role: it serves until its parent stops it.
func runReceiver(ctx context.Context, cio *harness.ChildIO) error {
	var p receiverParams
	if err := cio.Params(&p); err != nil {
		return err
	}
	r := &receiver{complete: make(chan struct{})}
	close(r.complete)
	r.kit = webhookstest.NewReceiver(&webhookstest.Options{Lean: true, OnArrival: r.onArrival})
	for i, e := range p.Endpoints {
		ep := r.kit.Endpoint(strconv.Itoa(i))
		if err := ep.SetSecret(e.Secret); err != nil {
			return err
		}
		ep.SetRule(webhookstest.Status(http.StatusNoContent))
		r.endpoints = append(r.endpoints, &endpoint{ordered: e.Ordered, space: e.Space, typ: e.Type, seen: map[uuid.UUID]arrival{}})
	}
	if p.Broker != nil {
		stop, err := r.consumeBroker(ctx, p.Broker)
		if err != nil {
			return err
		}
		// Before the process exits: what the run made on the broker goes.
		defer stop()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r.mux(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := cio.Send(receiverHello{URL: "http://" + ln.Addr().String()}); err != nil {
		return err
	}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (r *receiver) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook/{index}", r.serve)
	mux.HandleFunc("POST /ctl/expect", r.serveExpect)
	mux.HandleFunc("GET /ctl/wait", r.serveWait)
	mux.HandleFunc("GET /ctl/arrivals", r.serveArrivals)
	return mux
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	i, err := strconv.Atoi(req.PathValue("index"))
	if err != nil || i < 0 || i >= len(r.endpoints) {
		http.NotFound(w, req)
		return
	}
	// A bad signature is answered 204 too: it is not received, so it shows
	// as missing, and a retry would only repeat it.
	r.kit.ServeHTTP(w, req)
}

// onArrival counts a request (or a broker's message) at its endpoint and
// records each envelope of a verified one.
func (r *receiver) onArrival(a webhookstest.Arrival) {
	i, _ := strconv.Atoi(a.Endpoint)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Requests++
	if !a.Verified || len(a.Events) == 0 {
		r.stats.BadSignatures++
		return
	}
	for k := range a.Events {
		r.record(i, &a.Events[k], a.At)
	}
}

// record counts one delivery at subscription i; r.mu is held.
func (r *receiver) record(i int, env *sync.Envelope, at time.Time) {
	ep := r.endpoints[i]
	if _, seen := ep.seen[env.ID]; seen {
		r.stats.Duplicates++
		return
	}
	a := arrival{seq: env.Seq, at: at, stray: env.Space != ep.space || env.Type != ep.typ}
	ep.seen[env.ID] = a
	r.stats.Received++
	r.stats.LastArrival = at
	if a.stray {
		r.stats.Unexpected++
	}
	if ep.ordered && env.Seq < ep.lastSeq {
		r.stats.OrderViolations++
	}
	ep.lastSeq = max(ep.lastSeq, env.Seq)
	if r.counts(i, a) {
		ep.expected++
		r.stats.Expected++
		if ep.expected <= r.want.Counts[i] {
			r.stats.Missing--
			if r.stats.Missing == 0 {
				close(r.complete)
			}
		}
	}
}

// counts says whether arrival a at subscription i is one the expectation
// waits for; r.mu is held.
func (r *receiver) counts(i int, a arrival) bool {
	return !a.stray && i < len(r.want.Counts) && a.seq > r.want.After && a.seq <= r.want.Upto
}

// serveExpect sets the expectation and counts what arrived already.
func (r *receiver) serveExpect(w http.ResponseWriter, req *http.Request) {
	var want expectation
	if err := json.NewDecoder(req.Body).Decode(&want); err != nil || len(want.Counts) != len(r.endpoints) {
		http.Error(w, "want {after, upto, counts: one per endpoint}", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.want, r.stats.Missing, r.stats.Expected = want, 0, 0
	for i, ep := range r.endpoints {
		ep.expected = 0
		for _, a := range ep.seen {
			if r.counts(i, a) {
				ep.expected++
			}
		}
		r.stats.Expected += ep.expected
		r.stats.Missing += max(0, want.Counts[i]-ep.expected)
	}
	r.complete = make(chan struct{})
	if r.stats.Missing == 0 {
		close(r.complete)
	}
	w.WriteHeader(http.StatusNoContent)
}

// serveWait answers the counts once nothing expected is missing, or after
// ?timeout (default 1s).
func (r *receiver) serveWait(w http.ResponseWriter, req *http.Request) {
	timeout, err := time.ParseDuration(req.URL.Query().Get("timeout"))
	if err != nil {
		timeout = time.Second
	}
	r.mu.Lock()
	complete := r.complete
	r.mu.Unlock()
	select {
	case <-complete:
	case <-time.After(timeout):
	case <-req.Context().Done():
		return
	}
	r.mu.Lock()
	stats := r.stats
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(stats)
}

// serveArrivals lists the expected deliveries that arrived.
func (r *receiver) serveArrivals(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	var out []arrivalRecord
	for i, ep := range r.endpoints {
		for id, a := range ep.seen {
			if r.counts(i, a) {
				out = append(out, arrivalRecord{Sub: i, ID: id, Seq: a.seq, At: a.at})
			}
		}
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
