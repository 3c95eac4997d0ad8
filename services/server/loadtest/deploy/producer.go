package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	gosync "sync"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// ProducerRole is the child process that POSTs a load's events, so that
// its CPU time is neither the api's nor the load test's. A load test's
// command registers it with its other child roles (harness.RunChild).
const ProducerRole = "deploy.producer"

// ProducerParams is one phase of HTTP producers.
type ProducerParams struct {
	// API is the api role's base URL, such as http://127.0.0.1:8080;
	// Token a bearer token with events:write and write on every target's
	// space (WriterToken).
	API   string `json:"api"`
	Token string `json:"token"`
	// Rate is events per second, open loop; Duration how long.
	Rate     float64       `json:"rate"`
	Duration time.Duration `json:"duration"`
	// Connections is how many requests may be open at once, each on its
	// own keep-alive connection.
	Connections int `json:"connections"`
	// EventsPerRequest events go in each POST, all to one target.
	EventsPerRequest int `json:"events_per_request"`
	// Targets are (space, type) pairs: request i goes to target i mod
	// len(Targets).
	Targets [][2]string `json:"targets"`
}

// Sent is one acknowledged event: its seq, target, and when its request
// was sent and answered 201, in Unix nanoseconds on this machine's clock.
type Sent struct {
	Seq    int64 `json:"q"`
	Target int   `json:"t"`
	Send   int64 `json:"s"`
	Ack    int64 `json:"a"`
}

// ProducerResult is what one phase appended.
type ProducerResult struct {
	Sent []Sent `json:"sent"`
	// Failed counts requests that got no 201, by status ("503") or by
	// "error" when no answer came; FirstError is the first one's message.
	Failed     map[string]int `json:"failed,omitempty"`
	FirstError string         `json:"first_error,omitempty"`
	Seconds    float64        `json:"seconds"`
}

// Produce runs one phase of p in a producer process and returns what it
// appended and the CPU time the process used.
func Produce(ctx context.Context, p *ProducerParams) (*ProducerResult, time.Duration, error) {
	var res ProducerResult
	child, err := harness.StartChild(ctx, ProducerRole, p, &struct{}{})
	if err != nil {
		return nil, 0, err
	}
	nextErr := child.Next(&res)
	cpu, err := child.Wait()
	return &res, cpu, errors.Join(nextErr, err)
}

// RunProducer is the producer role.
func RunProducer(ctx context.Context, cio *harness.ChildIO) error {
	var p ProducerParams
	if err := cio.Params(&p); err != nil {
		return err
	}
	if err := cio.Send(struct{}{}); err != nil {
		return err
	}
	pr, err := newProducer(&p)
	if err != nil {
		return err
	}
	began := time.Now()
	sent, _ := harness.OpenLoop(ctx, &harness.LoadParams{Rate: p.Rate / float64(p.EventsPerRequest), Duration: p.Duration,
		Producers: p.Connections}, pr.post)
	res := ProducerResult{Failed: pr.failed, FirstError: pr.firstErr, Seconds: time.Since(began).Seconds()}
	for _, s := range sent {
		res.Sent = append(res.Sent, s...)
	}
	return cio.Send(res)
}

type producer struct {
	p      *ProducerParams
	client *http.Client
	urls   []string

	mu       gosync.Mutex
	failed   map[string]int
	firstErr string
}

func newProducer(p *ProducerParams) (*producer, error) {
	if p.EventsPerRequest < 1 || p.Connections < 1 || len(p.Targets) == 0 {
		return nil, errors.New("producer: want events per request, connections and targets")
	}
	pr := &producer{p: p, failed: map[string]int{}, client: &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		MaxIdleConnsPerHost: p.Connections, MaxConnsPerHost: p.Connections, DisableCompression: true}}}
	for _, t := range p.Targets {
		pr.urls = append(pr.urls, p.API+"/v1/spaces/"+url.PathEscape(t[0])+"/events")
	}
	return pr, nil
}

// appendBody is the request body; appendAnswer the part of a 201 the
// producer reads.
type appendBody struct {
	Events []appendEvent `json:"events"`
}

type appendEvent struct {
	ID   uuid.UUID       `json:"id"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

type appendAnswer struct {
	Events []struct {
		Seq int64 `json:"seq"`
	} `json:"events"`
}

var eventData = json.RawMessage(`{"n":1}`)

// post sends request i. A request that is not answered 201 is counted,
// not retried: its events are not part of the load.
func (pr *producer) post(ctx context.Context, i int) ([]Sent, error) {
	t := i % len(pr.urls)
	body := appendBody{Events: make([]appendEvent, pr.p.EventsPerRequest)}
	for k := range body.Events {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		body.Events[k] = appendEvent{ID: id, Type: pr.p.Targets[t][1], Data: eventData}
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, pr.urls[t], bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+pr.p.Token)
	req.Header.Set("Content-Type", "application/json")
	send := time.Now()
	resp, err := pr.client.Do(req)
	if err != nil {
		pr.fail("error", err.Error())
		return nil, nil
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	ack := time.Now()
	if err != nil || resp.StatusCode != http.StatusCreated {
		pr.fail(fmt.Sprint(resp.StatusCode), fmt.Sprintf("%d %s (%v)", resp.StatusCode, answer, err))
		return nil, nil
	}
	var a appendAnswer
	if err := json.Unmarshal(answer, &a); err != nil || len(a.Events) != len(body.Events) {
		pr.fail("bad answer", fmt.Sprintf("201 with %s (%v)", answer, err))
		return nil, nil
	}
	out := make([]Sent, len(a.Events))
	for k, e := range a.Events {
		out[k] = Sent{Seq: e.Seq, Target: t, Send: send.UnixNano(), Ack: ack.UnixNano()}
	}
	return out, nil
}

func (pr *producer) fail(kind, msg string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.failed[kind]++
	if pr.firstErr == "" {
		pr.firstErr = msg
	}
}
