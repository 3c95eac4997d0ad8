package pushtest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	gosync "sync"
	"time"
)

// Message is one push request the receiver accepted and decrypted.
type Message struct {
	// Device is the name the device was added under.
	Device string
	// Payload is the decrypted plaintext.
	Payload []byte
	// Header is the request's header (TTL, Urgency, Authorization...).
	Header http.Header
	// At is when decryption finished.
	At time.Time
}

// Response is what the receiver answers for a device; the zero value means
// 201 Created.
type Response struct {
	Status int
	Header http.Header
}

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	// VAPIDPublicKey, if set, is the key every request's VAPID header must
	// carry and verify against.
	VAPIDPublicKey string
	// OnMessage, if set, is called for every decrypted message, from the
	// request's goroutine, before the response is written.
	OnMessage func(Message)
	// Respond, if set, chooses the answer for a device before the body is
	// read (a gone subscription, a rate limit). Requests answered with
	// another status than 2xx are counted but not decrypted.
	Respond func(device string) Response
	// Delay, if set, is how long the receiver holds its answer after it
	// accepted a device's message, as a slow push service does. A client
	// that gives up meanwhile ends the wait; the message stays accepted.
	Delay func(device string) time.Duration
}

// Receiver is a local push service on 127.0.0.1: one endpoint per device,
// at /push/{device}.
type Receiver struct {
	srv *httptest.Server
	cfg ReceiverConfig

	mu       gosync.Mutex
	devices  map[string]*Device
	requests map[string]int
	messages []Message
	errs     []error
	// verified holds VAPID headers already verified, with their exp.
	verified map[string]time.Time
}

// NewReceiver starts a receiver; Close stops it.
func NewReceiver(cfg *ReceiverConfig) *Receiver {
	r := &Receiver{cfg: *cfg, devices: map[string]*Device{}, requests: map[string]int{}, verified: map[string]time.Time{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /push/{device}", r.serve)
	r.srv = httptest.NewServer(mux)
	return r
}

// Close stops the server.
func (r *Receiver) Close() { r.srv.Close() }

// URL is the server's base URL (http://127.0.0.1:port).
func (r *Receiver) URL() string { return r.srv.URL }

// AddDevice creates keys for a device and returns them with its endpoint.
func (r *Receiver) AddDevice(name string) (*Device, string, error) {
	d, err := NewDevice()
	if err != nil {
		return nil, "", err
	}
	r.mu.Lock()
	r.devices[name] = d
	r.mu.Unlock()
	return d, r.srv.URL + "/push/" + name, nil
}

// Requests is how many requests reached a device's endpoint, whatever the
// answer.
func (r *Receiver) Requests(device string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests[device]
}

// Messages returns a copy of the decrypted messages so far.
func (r *Receiver) Messages() []Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Message(nil), r.messages...)
}

// Errors returns the requests that failed verification or decryption.
func (r *Receiver) Errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("device")
	r.mu.Lock()
	d := r.devices[name]
	r.requests[name]++
	r.mu.Unlock()
	if d == nil {
		http.Error(w, "no such subscription", http.StatusGone)
		return
	}
	if r.cfg.Respond != nil {
		if res := r.cfg.Respond(name); res.Status != 0 && res.Status/100 != 2 {
			for k, v := range res.Header {
				w.Header()[k] = v
			}
			_, _ = io.Copy(io.Discard, req.Body)
			w.WriteHeader(res.Status)
			return
		}
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 8192))
	if err == nil {
		err = r.checkRequest(req)
	}
	var plain []byte
	if err == nil {
		plain, err = d.Decrypt(body)
	}
	if err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, fmt.Errorf("device %s: %w", name, err))
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m := Message{Device: name, Payload: plain, Header: req.Header.Clone(), At: time.Now()}
	if r.cfg.OnMessage != nil {
		r.cfg.OnMessage(m)
	}
	r.mu.Lock()
	r.messages = append(r.messages, m)
	r.mu.Unlock()
	if r.cfg.Delay != nil {
		if d := r.cfg.Delay(name); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-req.Context().Done():
			}
			t.Stop()
		}
	}
	w.Header().Set("Location", req.URL.Path+"/msg")
	w.WriteHeader(http.StatusCreated)
}

// checkRequest holds the RFC 8030 headers every push request needs. A
// VAPID header is verified the first time it is seen and remembered until
// its exp, as a push service would: an application server sends one token
// for hours, and verifying its signature on every message would spend the
// load test's CPU on the stand-in for a service that runs elsewhere.
func (r *Receiver) checkRequest(req *http.Request) error {
	if ce := req.Header.Get("Content-Encoding"); ce != "aes128gcm" {
		return fmt.Errorf("content-encoding %q, want aes128gcm", ce)
	}
	if req.Header.Get("TTL") == "" {
		return fmt.Errorf("no TTL header")
	}
	if r.cfg.VAPIDPublicKey == "" {
		return nil
	}
	h := req.Header.Get("Authorization")
	r.mu.Lock()
	exp, ok := r.verified[h]
	r.mu.Unlock()
	if ok && time.Now().Before(exp) {
		return nil
	}
	exp, err := verifyVAPID(req, r.srv.URL, r.cfg.VAPIDPublicKey)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.verified[h] = exp
	r.mu.Unlock()
	return nil
}
