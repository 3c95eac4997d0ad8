package soak

import (
	"encoding/json"
	"net/http"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
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

// target is one webhook subscription and its endpoint at the receiver.
type target struct {
	name      string
	space     string
	owner     string
	id        uuid.UUID
	secret    string
	ep        *webhookstest.Endpoint
	mode      atomic.Int32
	holdFor   time.Duration // how long modeTimeout holds a request
	faultResp atomic.Int64  // requests answered by a fault mode

	mu      gosync.Mutex
	resumes []int64 // resume_after_seq at creation and after every enable

	// revoked is set when the owner's right was revoked.
	revoked    bool
	revokedAt  time.Time
	revokedSeq int64 // head read after the revocation committed
}

// answer is the target's answer in its current mode.
func (t *target) answer(*webhookstest.Arrival) webhookstest.Answer {
	mode := t.mode.Load()
	if mode != modeOK {
		t.faultResp.Add(1)
	}
	switch mode {
	case mode5xx:
		return webhookstest.Answer{Status: http.StatusServiceUnavailable}
	case modeGone:
		return webhookstest.Gone
	case modeTimeout:
		return webhookstest.Answer{Status: http.StatusNoContent, Delay: t.holdFor}
	default:
		return webhookstest.Answer{Status: http.StatusNoContent}
	}
}

// snapshot is what the target's endpoint saw: the arrivals of envelopes
// and how many requests had a bad signature.
func (t *target) snapshot() ([]arrival, int) {
	var out []arrival
	for _, a := range t.ep.Arrivals() {
		if len(a.Events) > 0 {
			out = append(out, arrival{seq: a.Seq, at: a.At, status: a.Status})
		}
	}
	return out, t.ep.BadSignatures()
}

// webhookReceivers serves every target at /hook/{name} on 127.0.0.1 with
// the webhook test kit, which verifies each request's signature.
type webhookReceivers struct {
	srv *webhookstest.Server
}

func newWebhookReceivers() *webhookReceivers {
	return &webhookReceivers{srv: webhookstest.NewServer(&webhookstest.Options{Lean: true})}
}

// add serves t at its endpoint, answering by its mode.
func (w *webhookReceivers) add(t *target) {
	t.ep = w.srv.Endpoint(t.name)
	t.ep.SetRule(t.answer)
}

func (w *webhookReceivers) url(name string) string { return w.srv.URL(name) }

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
