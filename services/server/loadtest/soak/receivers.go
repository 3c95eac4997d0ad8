package soak

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// Receiver behaviours a webhook target can be switched to.
const (
	modeOK int32 = iota
	mode5xx
	modeTimeout
	modeGone
)

// arrival is one request a webhook receiver saw.
type arrival struct {
	seq    int64
	at     time.Time
	status int // what the receiver answered (0: held past the sender's timeout)
}

// target is one webhook subscription and its local receiver path.
type target struct {
	name      string
	space     string
	owner     string
	id        uuid.UUID
	secret    string
	verifier  *standardwebhooks.Webhook
	mode      atomic.Int32
	holdFor   time.Duration // how long modeTimeout holds a request
	faultResp atomic.Int64  // requests answered by a fault mode

	mu       gosync.Mutex
	arrivals []arrival
	badSig   int
	resumes  []int64 // resume_after_seq at creation and after every enable

	// revoked is set when the owner's right was revoked.
	revoked    bool
	revokedAt  time.Time
	revokedSeq int64 // head read after the revocation committed
}

func (t *target) snapshot() ([]arrival, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]arrival(nil), t.arrivals...), t.badSig
}

// webhookReceivers serves every target at /wh/{name} on 127.0.0.1.
type webhookReceivers struct {
	srv     *httptest.Server
	mu      gosync.Mutex
	targets map[string]*target
}

func newWebhookReceivers() *webhookReceivers {
	w := &webhookReceivers{targets: map[string]*target{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /wh/{name}", w.serve)
	w.srv = httptest.NewServer(mux)
	return w
}

func (w *webhookReceivers) add(t *target) {
	w.mu.Lock()
	w.targets[t.name] = t
	w.mu.Unlock()
}

func (w *webhookReceivers) url(name string) string { return w.srv.URL + "/wh/" + name }

func (w *webhookReceivers) serve(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	t := w.targets[r.PathValue("name")]
	w.mu.Unlock()
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if t == nil || err != nil {
		http.Error(rw, "unknown target", http.StatusBadRequest)
		return
	}
	var env sync.Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		http.Error(rw, "bad envelope", http.StatusBadRequest)
		return
	}
	a := arrival{seq: env.Seq, at: time.Now()}
	sigOK := t.verifier == nil || t.verifier.Verify(body, r.Header) == nil
	mode := t.mode.Load()
	switch mode {
	case mode5xx:
		a.status = http.StatusServiceUnavailable
	case modeGone:
		a.status = http.StatusGone
	case modeTimeout:
		a.status = 0
	default:
		a.status = http.StatusNoContent
	}
	t.mu.Lock()
	t.arrivals = append(t.arrivals, a)
	if !sigOK {
		t.badSig++
	}
	t.mu.Unlock()
	if mode != modeOK {
		t.faultResp.Add(1)
	}
	switch mode {
	case modeTimeout:
		select {
		case <-r.Context().Done():
		case <-time.After(t.holdFor):
		}
		rw.WriteHeader(http.StatusNoContent)
	case modeOK:
		rw.WriteHeader(http.StatusNoContent)
	default:
		rw.WriteHeader(a.status)
	}
}

// device is one push registration and its principal.
type device struct {
	name      string
	principal string
	spaces    []string
	regID     uuid.UUID
	failing   atomic.Bool // answers 503 while set
	faultResp atomic.Int64
}

// pushMessage is one decrypted push message.
type pushMessage struct {
	seq int64
	at  time.Time
}

// pushReceiver is the local Web Push service: pushtest's receiver, which
// checks VAPID and decrypts every message (RFC 8291).
type pushReceiver struct {
	rcv     *pushtest.Receiver
	mu      gosync.Mutex
	devices map[string]*device
	msgs    map[string][]pushMessage // by device name
	badJSON int
}

func newPushReceiver(vapidPublic string) *pushReceiver {
	p := &pushReceiver{devices: map[string]*device{}, msgs: map[string][]pushMessage{}}
	p.rcv = pushtest.NewReceiver(&pushtest.ReceiverConfig{
		VAPIDPublicKey: vapidPublic,
		OnMessage:      p.onMessage,
		Respond: func(name string) pushtest.Response {
			p.mu.Lock()
			d := p.devices[name]
			p.mu.Unlock()
			if d != nil && d.failing.Load() {
				d.faultResp.Add(1)
				return pushtest.Response{Status: http.StatusServiceUnavailable}
			}
			return pushtest.Response{}
		},
	})
	return p
}

func (p *pushReceiver) onMessage(m pushtest.Message) {
	var pl push.Payload
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := json.Unmarshal(m.Payload, &pl); err != nil {
		p.badJSON++
		return
	}
	p.msgs[m.Device] = append(p.msgs[m.Device], pushMessage{seq: pl.Seq, at: m.At})
}

func (p *pushReceiver) messages(name string) []pushMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]pushMessage(nil), p.msgs[name]...)
}
