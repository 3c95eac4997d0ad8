package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
)

// flakyReceiver answers its first request 500 and the others 204; got
// is the traceparent header of each.
type flakyReceiver struct{ *receiver }

func newFlakyReceiver(t *testing.T) *flakyReceiver {
	t.Helper()
	rv := &flakyReceiver{newReceiver(t)}
	rv.SetRule(func(a *webhookstest.Arrival) webhookstest.Answer {
		if a.N == 1 {
			return webhookstest.Answer{Status: http.StatusInternalServerError}
		}
		return webhookstest.Answer{Status: http.StatusNoContent}
	})
	return rv
}

func (rv *flakyReceiver) got() []string {
	var out []string
	for _, a := range rv.Arrivals() {
		out = append(out, a.Header.Get("traceparent"))
	}
	return out
}

// startTraced runs the real server (role all) on db, tracing into exp.
// extra are configuration keys and values.
func startTraced(t *testing.T, db *dbtest.DB, exp sdktrace.SpanExporter, extra ...string) string {
	t.Helper()
	flags := apptest.Flags(db.URL, "all")
	for i := 0; i+1 < len(extra); i += 2 {
		flags[extra[i]] = extra[i+1]
	}
	cfg, err := config.Load("", nil, flags)
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.WithoutCancel(context.Background()))) })
	srv := app.NewServer(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), app.Features(cfg))
	srv.TraceWith(tp)
	return apptest.Run(t, srv) // registered after tp's cleanup, so it stops first
}

// appendTraced appends one item.created event to s1 with token, as a
// client in the trace traceID that sends its span as traceparent, with
// headers (name, value pairs) on the request too; it returns the client's
// span.
func appendTraced(t *testing.T, base, token string, traceID trace.TraceID, headers ...string) trace.SpanContext {
	t.Helper()
	client := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: trace.SpanID{0xc1, 0x1e, 0x47}, TraceFlags: trace.FlagsSampled})
	req, err := http.NewRequest("POST", base+"/v1/spaces/s1/events", strings.NewReader(`{"events":[{"type":"item.created"}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("traceparent", sync.FormatTraceParent(client))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	r := send(t, req)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	return client
}

// spansNamed returns the spans of exp called name, in the order they ended.
func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// TestTrace_OneEventFromRequestToDelivery follows one event through the
// server with tracing on, from a client that sends a traceparent: the API
// request's span continues the client's trace; the event log's write is its
// child; the webhooks round that reads the event is a trace of its own
// linked to the write; the delivery job runs in the producer's trace as a
// child of the write; and each attempt (the first answered 500, the retry
// 204) is a child of the job run that made it. The receiver gets a
// traceparent of the producer's trace whose parent is the attempt's span.
func TestTrace_OneEventFromRequestToDelivery(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	exp := tracetest.NewInMemoryExporter()
	base := startTraced(t, db, exp)
	b := &testBundle{db: db, base: base}
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	rv := newFlakyReceiver(t)
	r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(
		`{"space":"s1","url":%q,"event_types":["item.*"],"retry_base_seconds":0.1,"retry_max_seconds":0.2}`, rv.url()))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)

	client := appendTraced(t, base, owner, trace.TraceID{0x0b, 0x07, 0x41, 0x17}, "X-Request-Id", "trace-test-0001")

	// A job run's span ends after its attempts': wait for the run too.
	deadline := time.Now().Add(30 * time.Second)
	for len(spansNamed(exp, "bothy.webhook.attempt")) < 2 || len(rv.got()) < 2 || len(spansNamed(exp, "river.work/webhook_out.deliver")) < 1 {
		require.True(t, time.Now().Before(deadline), "attempts: %d spans, %d requests", len(spansNamed(exp, "bothy.webhook.attempt")), len(rv.got()))
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}

	// request -> write
	https := spansNamed(exp, "POST /v1/spaces/{space}/events")
	require.Len(t, https, 1)
	httpSpan := https[0]
	require.Equal(t, client.TraceID(), httpSpan.SpanContext.TraceID(), "the request continues the client's trace")
	require.Equal(t, client.SpanID(), httpSpan.Parent.SpanID())
	require.Equal(t, `["trace-test-0001"]`, attr(httpSpan, "http.request.header.x-request-id"))
	require.Equal(t, "owner", attr(httpSpan, "user.id"))
	// The request's write. The failed first attempt also makes an
	// operational event (bothy.webhook.failing), whose write is in a trace
	// of its own.
	var writes []tracetest.SpanStub
	for _, w := range spansNamed(exp, "bothy.event_log.write") {
		if w.SpanContext.TraceID() == client.TraceID() {
			writes = append(writes, w)
		}
	}
	require.Len(t, writes, 1)
	write := writes[0]
	require.Equal(t, httpSpan.SpanContext.SpanID(), write.Parent.SpanID(), "the write is the request's child")
	require.Equal(t, client.TraceID(), write.SpanContext.TraceID())

	// round (linked)
	var linked bool
	for _, rs := range spansNamed(exp, "bothy.round") {
		for _, l := range rs.Links {
			if l.SpanContext.TraceID() == write.SpanContext.TraceID() && l.SpanContext.SpanID() == write.SpanContext.SpanID() {
				linked = linked || attr(rs, "bothy.consumer") == "webhooks"
				require.NotEqual(t, client.TraceID(), rs.SpanContext.TraceID(), "a round is a trace of its own")
			}
		}
	}
	require.True(t, linked, "the webhooks round links to the write")

	// job runs -> attempts
	runs := map[trace.SpanID]tracetest.SpanStub{}
	for _, w := range spansNamed(exp, "river.work/webhook_out.deliver") {
		if w.SpanContext.TraceID() == client.TraceID() {
			require.Equal(t, write.SpanContext.SpanID(), w.Parent.SpanID(), "a job run is the write's child")
			runs[w.SpanContext.SpanID()] = w
		}
	}
	require.NotEmpty(t, runs, "the job ran in the producer's trace")
	attempts := spansNamed(exp, "bothy.webhook.attempt")
	require.Len(t, attempts, 2)
	got := rv.got()
	for i, a := range attempts {
		require.Equal(t, client.TraceID(), a.SpanContext.TraceID())
		_, ok := runs[a.Parent.SpanID()]
		require.True(t, ok, "attempt %d is the child of a job run", i)
		sc, ok := sync.ParseTraceParent(got[i])
		require.True(t, ok, "receiver got traceparent %q", got[i])
		require.Equal(t, client.TraceID(), sc.TraceID(), "the receiver's traceparent belongs to the producer's trace")
		require.Equal(t, a.SpanContext.SpanID(), sc.SpanID(), "and names the attempt as its parent")
	}
	require.Equal(t, "500", attr(attempts[0], "http.response.status_code"))
	require.Equal(t, "retry", attr(attempts[0], "bothy.webhook.result"))
	require.Equal(t, "204", attr(attempts[1], "http.response.status_code"))
	require.Equal(t, "delivered", attr(attempts[1], "bothy.webhook.result"))
}

// TestTrace_OffStillForwardsTheProducersTraceparent runs the server with
// tracing off (no OTEL_* environment): bothy records no spans, yet the
// traceparent a producer sends is stored with its event and reaches the
// webhook receiver, so a receiver that traces joins the producer's trace.
func TestTrace_OffStillForwardsTheProducersTraceparent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	rv := newFlakyReceiver(t)
	r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(
		`{"space":"s1","url":%q,"event_types":["item.*"],"retry_base_seconds":0.1,"retry_max_seconds":0.2}`, rv.url()))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)

	client := appendTraced(t, b.base, owner, trace.TraceID{0x0f, 0xf0, 0x41, 0x17})

	deadline := time.Now().Add(30 * time.Second)
	for len(rv.got()) < 2 { // the first answer is a 500: the retry too
		require.True(t, time.Now().Before(deadline), "requests: %d", len(rv.got()))
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
	for i, tp := range rv.got()[:2] {
		sc, ok := sync.ParseTraceParent(tp)
		require.True(t, ok, "request %d: traceparent %q", i, tp)
		require.Equal(t, client.TraceID(), sc.TraceID(), "request %d belongs to the producer's trace", i)
	}
}

// TestTrace_PushJobRunsInTheProducersTrace: with tracing on, the push
// round's delivery job for one event runs in the producer's trace, as a
// child of the event log's write, and its message reaches the device.
func TestTrace_PushJobRunsInTheProducersTrace(t *testing.T) {
	t.Parallel()
	vapid, err := push.GenerateVAPIDKeys()
	require.NoError(t, err)
	rcv := pushtest.NewReceiver(&pushtest.ReceiverConfig{VAPIDPublicKey: vapid.Public})
	t.Cleanup(rcv.Close)
	db := dbtest.NewDB(t)
	exp := tracetest.NewInMemoryExporter()
	base := startTraced(t, db, exp, "push.vapid_public_key", vapid.Public, "push.vapid_private_key", vapid.Private,
		"push.allow_private_targets", "true")
	b := &testBundle{db: db, base: base}
	alice := b.principal(t, "alice", authz.RightRead, "s1", allScopes...)
	writer := b.principal(t, "writer", authz.RightWrite, "s1", allScopes...) // the actor is not notified
	dev, endpoint, err := rcv.AddDevice("phone")
	require.NoError(t, err)
	r := b.do(t, "POST", "/v1/push/registrations", alice, fmt.Sprintf(
		`{"subscription":{"endpoint":%q,"keys":{"p256dh":%q,"auth":%q}}}`, endpoint, dev.P256dh(), dev.Auth()))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)

	client := appendTraced(t, base, writer, trace.TraceID{0x0b, 0x07, 0x90, 0x54})

	deadline := time.Now().Add(30 * time.Second)
	for len(rcv.Messages()) < 1 || len(spansNamed(exp, "river.work/push.deliver")) < 1 {
		require.True(t, time.Now().Before(deadline), "messages: %d, runs: %d", len(rcv.Messages()), len(spansNamed(exp, "river.work/push.deliver")))
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
	var write tracetest.SpanStub
	for _, w := range spansNamed(exp, "bothy.event_log.write") {
		if w.SpanContext.TraceID() == client.TraceID() {
			write = w
		}
	}
	require.True(t, write.SpanContext.IsValid(), "the request's write is in the client's trace")
	runs := spansNamed(exp, "river.work/push.deliver")
	require.Len(t, runs, 1)
	require.Equal(t, client.TraceID(), runs[0].SpanContext.TraceID(), "the push job runs in the producer's trace")
	require.Equal(t, write.SpanContext.SpanID(), runs[0].Parent.SpanID(), "as the write's child")
}
