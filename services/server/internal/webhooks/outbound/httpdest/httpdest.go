// Package httpdest is the HTTP receiver behind the destination port: one
// signed POST per message through the deliveries' HTTP client (egress
// policy at every dial, no proxy, no redirect), answered Delivered on a
// 2xx, Gone on 410, Retry otherwise.
package httpdest

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// Pool is the process's HTTP client for every receiver; the client keeps
// the connections per host.
type Pool struct {
	client  *http.Client
	maxBody int
}

// NewPool returns a pool sending with client and reading at most maxBody
// bytes of each answer.
func NewPool(client *http.Client, maxBody int) *Pool {
	return &Pool{client: client, maxBody: maxBody}
}

// Destination returns the receiver at t.URL.
func (p *Pool) Destination(t *outbound.Target) outbound.Destination {
	return &destination{pool: p, target: t}
}

// Close lets the client's idle connections go.
func (p *Pool) Close() { p.client.CloseIdleConnections() }

type destination struct {
	pool   *Pool
	target *outbound.Target
}

// Send posts m signed at ts, with the W3C traceparent of ctx's span (the
// attempt's) over any custom header of that name, so the receiver's spans
// join the event's trace.
func (d *destination) Send(ctx context.Context, m *outbound.Message, ts time.Time) outbound.Answer {
	req, err := outbound.NewRequest(ctx, d.target, m, ts)
	if err != nil {
		return outbound.Answer{Kind: outbound.Retry, Err: err.Error()}
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return outbound.Post(d.pool.client, req, d.pool.maxBody)
}

// Driver is the http kind for the registry. Its fields are the
// subscription's url, checked by the webhooks store, so Check accepts
// only an empty object.
var Driver = outbound.Driver{
	Check: func(json.RawMessage) (outbound.Checked, error) {
		return outbound.Checked{Redacted: json.RawMessage(`{}`)}, nil
	},
	Open: func(o *outbound.OpenParams) outbound.Opener {
		return opener{NewPool(outbound.NewHTTPClient(o.Timeout, o.Policy.AllowPrivate), o.MaxResponseBytes)}
	},
}

type opener struct{ *Pool }

func (o opener) Destination(t *outbound.Target) (outbound.Destination, error) {
	return o.Pool.Destination(t), nil
}
