package webhookhandoff

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// delivery names one expected delivery: the subscription's index and the
// event.
type delivery struct {
	sub int
	id  uuid.UUID
}

// receiverProc is the receiver role's process, as the load test drives
// it.
type receiverProc struct {
	child  *harness.Child
	url    string
	client *http.Client
}

// startReceiver starts the receiver with one endpoint per subscription,
// consuming from broker if it is set.
func startReceiver(ctx context.Context, endpoints []endpointParams, broker *brokerParams) (*receiverProc, error) {
	var hello receiverHello
	child, err := harness.StartChild(ctx, receiverRole, receiverParams{Endpoints: endpoints, Broker: broker}, &hello)
	if err != nil {
		return nil, err
	}
	return &receiverProc{child: child, url: hello.URL, client: &http.Client{}}, nil
}

// hookURL is subscription k's URL.
func (r *receiverProc) hookURL(k int) string { return r.url + "/hook/" + strconv.Itoa(k) }

// pid is the receiver's process id.
func (r *receiverProc) pid() int { return r.child.PID() }

// stop ends the receiver.
func (r *receiverProc) stop() {
	r.client.CloseIdleConnections()
	_, _ = r.child.Wait()
}

// expect tells the receiver which deliveries to wait for.
func (r *receiverProc) expect(ctx context.Context, want *expectation) error {
	body, err := json.Marshal(want)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url+"/ctl/expect", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("receiver: expect: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("receiver: expect: %s", resp.Status)
	}
	return nil
}

// stats returns the receiver's counts once nothing expected is missing,
// or after timeout.
func (r *receiverProc) stats(ctx context.Context, timeout time.Duration) (*receiverStats, error) {
	var s receiverStats
	return &s, r.get(ctx, "/ctl/wait?timeout="+timeout.String(), &s)
}

// await waits until nothing expected is missing, at most within; it
// returns early, with an error, if the worker stopped (done received).
// It returns the last counts read.
func (r *receiverProc) await(ctx context.Context, within time.Duration, done <-chan error) (*receiverStats, error) {
	deadline := time.Now().Add(within)
	for {
		s, err := r.stats(ctx, min(time.Second, max(time.Until(deadline), time.Millisecond)))
		if err != nil || s.Missing == 0 {
			return s, err
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("%d still missing after %s", s.Missing, within)
		}
		select {
		case err := <-done:
			return s, fmt.Errorf("worker stopped: %v", err)
		default:
		}
	}
}

// arrivals returns when each expected delivery that arrived arrived.
func (r *receiverProc) arrivals(ctx context.Context) (map[delivery]time.Time, error) {
	var list []arrivalRecord
	if err := r.get(ctx, "/ctl/arrivals", &list); err != nil {
		return nil, err
	}
	out := make(map[delivery]time.Time, len(list))
	for _, a := range list {
		out[delivery{sub: a.Sub, id: a.ID}] = a.At
	}
	return out, nil
}

// seqDelivery names one delivery by the subscription's index and the
// event's seq.
type seqDelivery struct {
	sub int
	seq int64
}

// arrivalsBySeq returns when each expected delivery that arrived arrived.
func (r *receiverProc) arrivalsBySeq(ctx context.Context) (map[seqDelivery]time.Time, error) {
	var list []arrivalRecord
	if err := r.get(ctx, "/ctl/arrivals", &list); err != nil {
		return nil, err
	}
	out := make(map[seqDelivery]time.Time, len(list))
	for _, a := range list {
		out[seqDelivery{sub: a.Sub, seq: a.Seq}] = a.At
	}
	return out, nil
}

func (r *receiverProc) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url+path, nil)
	if err != nil {
		return err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("receiver: %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
