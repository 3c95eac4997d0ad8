package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

// arrival is one message a receiver got: the event's id and seq as sent.
type arrival struct {
	id  uuid.UUID
	seq int64
	at  time.Time
}

// inbox is what one receiver (a webhook subscription's path, a push
// device) got, in arrival order.
type inbox struct {
	name    string
	ordered bool
	mu      gosync.Mutex
	got     []arrival
}

func (b *inbox) add(a arrival) {
	b.mu.Lock()
	b.got = append(b.got, a)
	b.mu.Unlock()
}

func (b *inbox) arrivals() []arrival {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]arrival(nil), b.got...)
}

// firstAfter is the time of the first arrival after t.
func (b *inbox) firstAfter(t time.Time) (time.Time, bool) {
	for _, a := range b.arrivals() {
		if a.at.After(t) {
			return a.at, true
		}
	}
	return time.Time{}, false
}

// lastBefore is the time of the last arrival before t.
func (b *inbox) lastBefore(t time.Time) (time.Time, bool) {
	var last time.Time
	for _, a := range b.arrivals() {
		if a.at.Before(t) {
			last = a.at
		}
	}
	return last, !last.IsZero()
}

// hookReceiver receives every webhook subscription at /hook/{name} with
// the webhook test kit, which adds each envelope to its inbox.
type hookReceiver struct {
	srv     *webhookstest.Server
	inboxes map[string]*inbox
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{inboxes: map[string]*inbox{
		foOrdered: {name: "webhook " + foOrdered, ordered: true}, foUnordered: {name: "webhook " + foUnordered}}}
	h.srv = recvtest.Start(t, &webhookstest.Options{Lean: true, OnArrival: func(a webhookstest.Arrival) {
		if b := h.inboxes[a.Endpoint]; b != nil && a.OK() {
			for _, env := range a.Events {
				b.add(arrival{id: env.ID, seq: env.Seq, at: a.At})
			}
		}
	}})
	for name := range h.inboxes {
		h.srv.Endpoint(name).SetRule(webhookstest.Status(http.StatusNoContent))
	}
	return h
}

func (h *hookReceiver) url(name string) string { return h.srv.URL(name) }

// pushDevices is a local push service (pushtest: it checks VAPID and
// decrypts every message) with one inbox per device.
type pushDevices struct {
	rcv     *pushtest.Receiver
	mu      gosync.Mutex
	inboxes map[string]*inbox
}

func newPushDevices(t *testing.T, vapidPublic string) *pushDevices {
	p := &pushDevices{inboxes: map[string]*inbox{}}
	p.rcv = pushtest.NewReceiver(&pushtest.ReceiverConfig{VAPIDPublicKey: vapidPublic, OnMessage: func(m pushtest.Message) {
		var pl push.Payload
		if err := json.Unmarshal(m.Payload, &pl); err != nil {
			t.Errorf("push message to %s: %v", m.Device, err)
			return
		}
		p.mu.Lock()
		b := p.inboxes[m.Device]
		p.mu.Unlock()
		b.add(arrival{id: pl.EventID, seq: pl.Seq, at: m.At})
	}})
	t.Cleanup(p.rcv.Close)
	return p
}

// add creates a device and returns its endpoint and keys.
func (p *pushDevices) add(t *testing.T, name string) (endpoint, p256dh, auth string) {
	d, endpoint, err := p.rcv.AddDevice(name)
	require.NoError(t, err)
	p.mu.Lock()
	p.inboxes[name] = &inbox{name: "push " + name}
	p.mu.Unlock()
	return endpoint, d.P256dh(), d.Auth()
}

// receivers are every inbox: the webhook subscriptions', then the devices'.
func (fo *failover) receivers() []*inbox {
	out := []*inbox{fo.hooks.inboxes[foOrdered], fo.hooks.inboxes[foUnordered]}
	fo.devices.mu.Lock()
	defer fo.devices.mu.Unlock()
	for _, name := range foDevices {
		out = append(out, fo.devices.inboxes[name])
	}
	return out
}

// answer is one answer a producer got: when the request was sent, when
// the answer came, and its HTTP status (0 when the request itself failed).
type answer struct {
	sent, at time.Time
	status   int
}

// ackLog is what the producers were told.
type ackLog struct {
	mu      gosync.Mutex
	ids     map[string]int64 // acknowledged event id → seq
	answers []answer
}

func (a *ackLog) record(an answer, acked map[string]int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.answers = append(a.answers, an)
	for id, seq := range acked {
		a.ids[id] = seq
	}
}

// firstAckAfter is the first 2xx answered after t.
func (a *ackLog) firstAckAfter(t time.Time) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, an := range a.answers {
		if an.status/100 == 2 && an.at.After(t) {
			return an.at, true
		}
	}
	return time.Time{}, false
}

// firstAckSentAfter is the first 2xx to a request sent after t.
func (a *ackLog) firstAckSentAfter(t time.Time) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, an := range a.answers {
		if an.status/100 == 2 && an.sent.After(t) {
			return an.at, true
		}
	}
	return time.Time{}, false
}

func (a *ackLog) snapshot() (map[string]int64, []answer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make(map[string]int64, len(a.ids))
	for k, v := range a.ids {
		ids[k] = v
	}
	return ids, append([]answer(nil), a.answers...)
}

// loadRun is the producers' run.
type loadRun struct {
	stop chan struct{}
	wg   gosync.WaitGroup
}

// foProducers append concurrently, each a request of one to three events
// every 100 ms, and again with the same ids after a failed answer.
const foProducers = 2

func (fo *failover) startLoad() {
	fo.load = &loadRun{stop: make(chan struct{})}
	for i := range foProducers {
		fo.load.wg.Add(1)
		go func() {
			defer fo.load.wg.Done()
			fo.produce(i)
		}()
	}
}

func (fo *failover) produce(worker int) {
	client := &http.Client{Timeout: 30 * time.Second}
	for i := 0; ; i++ {
		if !fo.appendUntilAcked(client, 1+(i+worker)%3) {
			return
		}
		select {
		case <-fo.load.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// appendUntilAcked appends n new events, repeating the request with the
// same ids every 100 ms while it fails with 503 or no answer, as clients
// are told to. It returns false when the load is stopped first or the API
// answered anything else.
func (fo *failover) appendUntilAcked(client *http.Client, n int) bool {
	var evs []string
	for range n {
		evs = append(evs, fmt.Sprintf(`{"id":%q,"type":"item.changed","data":{}}`, uuid.New()))
	}
	body := `{"events":[` + strings.Join(evs, ",") + `]}`
	for {
		sent := time.Now()
		status, acked, err := fo.post(client, body)
		fo.acks.record(answer{sent: sent, at: time.Now(), status: status}, acked)
		switch {
		case status == http.StatusCreated:
			return true
		case status != http.StatusServiceUnavailable && status != 0:
			fo.t.Errorf("append answered %d: %v", status, err)
			return false
		}
		select {
		case <-fo.load.stop:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// post sends one append and returns the status and, for a 201, the seq of
// every event by id.
func (fo *failover) post(client *http.Client, body string) (int, map[string]int64, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+fo.apiAddr+"/v1/spaces/"+foSpace+"/events", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+fo.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusCreated {
		return res.StatusCode, nil, fmt.Errorf("%s: %s", res.Status, bytes.TrimSpace(b))
	}
	var out struct {
		Events []sync.Envelope `json:"events"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, nil, err
	}
	acked := map[string]int64{}
	for _, e := range out.Events {
		acked[e.ID.String()] = e.Seq
	}
	return res.StatusCode, acked, nil
}

// finishLoad lets the producers run until after the last rejoin every
// receiver got messages again, stops them, and waits until every
// acknowledged event reached every receiver, for at most 2 minutes (verify
// says what is missing after that).
func (fo *failover) finishLoad(t *testing.T) {
	fo.waitTraffic(t, fo.losses[len(fo.losses)-1].rejoined)
	close(fo.load.stop)
	fo.load.wg.Wait()
	acked, _ := fo.acks.snapshot()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		behind := 0
		for _, r := range fo.receivers() {
			behind += missingFrom(r, acked)
		}
		if behind == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond) // polling a condition with a deadline
	}
}

// missingFrom counts the acknowledged events r has not received.
func missingFrom(r *inbox, acked map[string]int64) int {
	seen := map[string]bool{}
	for _, a := range r.arrivals() {
		seen[a.id.String()] = true
	}
	n := 0
	for id := range acked {
		if !seen[id] {
			n++
		}
	}
	return n
}
