package webhookhandoff

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	gosync "sync"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// delivery names one request: the subscription's index and the event.
type delivery struct {
	sub int
	id  uuid.UUID
}

// endpoint is one subscription's receiver path.
type endpoint struct {
	verifier *standardwebhooks.Webhook
	ordered  bool
	lastSeq  int64 // highest seq received
}

// receiver serves every subscription at /hook/{index} on 127.0.0.1. It
// verifies each request's signature with the Standard Webhooks library and
// answers 204 at once; a request is received when its signature verified,
// and that moment ends its latency.
type receiver struct {
	srv *httptest.Server

	mu         gosync.Mutex
	endpoints  []*endpoint
	arrivals   map[delivery]time.Time
	perEvent   map[uuid.UUID]int // distinct subscriptions that received the event
	badSig     int
	duplicates int
	outOfOrder int // on ordered subscriptions: a seq below one received before
}

func newReceiver() *receiver {
	r := &receiver{arrivals: map[delivery]time.Time{}, perEvent: map[uuid.UUID]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook/{index}", r.serve)
	r.srv = httptest.NewServer(mux)
	return r
}

func (r *receiver) close() { r.srv.Close() }

// add serves the next subscription with its signing secret and returns
// its URL.
func (r *receiver) add(secret string, ordered bool) (string, error) {
	v, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endpoints = append(r.endpoints, &endpoint{verifier: v, ordered: ordered})
	return r.srv.URL + "/hook/" + strconv.Itoa(len(r.endpoints)-1), nil
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	i, err := strconv.Atoi(req.PathValue("index"))
	r.mu.Lock()
	ok := err == nil && i >= 0 && i < len(r.endpoints)
	var ep *endpoint
	if ok {
		ep = r.endpoints[i]
	}
	r.mu.Unlock()
	if !ok {
		http.NotFound(w, req)
		return
	}
	body, _ := io.ReadAll(req.Body)
	verr := ep.verifier.Verify(body, req.Header)
	at := time.Now()
	var env sync.Envelope
	jerr := json.Unmarshal(body, &env)
	r.mu.Lock()
	r.record(i, ep, &env, at, verr == nil && jerr == nil)
	r.mu.Unlock()
	// A bad signature is answered 204 too: it is not received, so it shows
	// as missing, and a retry would only repeat it.
	w.WriteHeader(http.StatusNoContent)
}

// record counts one request; r.mu is held.
func (r *receiver) record(i int, ep *endpoint, env *sync.Envelope, at time.Time, verified bool) {
	if !verified {
		r.badSig++
		return
	}
	k := delivery{sub: i, id: env.ID}
	if _, seen := r.arrivals[k]; seen {
		r.duplicates++
		return
	}
	r.arrivals[k] = at
	r.perEvent[env.ID]++
	if ep.ordered && env.Seq < ep.lastSeq {
		r.outOfOrder++
	}
	ep.lastSeq = max(ep.lastSeq, env.Seq)
}

// missing is how many deliveries of ids have not been received yet; want
// says how many subscriptions an event goes to.
func (r *receiver) missing(ids []uuid.UUID, want func(uuid.UUID) int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, id := range ids {
		n += max(0, want(id)-r.perEvent[id])
	}
	return n
}
