package delivery

import (
	"cmp"
	"context"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// startAttempt starts the span of one delivery attempt in the trace of the
// event it sends (the producer's, stored with the event): as a child of the
// job's span when the job runs in that trace, else as a child of the
// producer's span with a link to the job's, since one job sends the events
// of many producers. It names the destination's kind, never its address.
// It traces with the provider of the job's span, so it records exactly
// when River's work is traced; with tracing off it still
// carries the event's trace context to the receiver.
func startAttempt(ctx context.Context, subID uuid.UUID, kind string, r *request) (context.Context, trace.Span) {
	job := trace.SpanFromContext(ctx)
	head := r.head()
	attrs := []attribute.KeyValue{
		attribute.String("bothy.webhook.subscription_id", subID.String()),
		attribute.Int64("bothy.event.seq", head.seq),
		attribute.String("bothy.event.id", head.eventID.String()),
		attribute.String("bothy.webhook.destination_kind", cmp.Or(kind, outbound.KindHTTP)),
	}
	if len(r.items) > 1 {
		attrs = append(attrs, attribute.Int("bothy.webhook.batch_size", len(r.items)))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)}
	if sc, ok := sync.ParseTraceParent(r.msg.TraceParent); ok && sc.TraceID() != job.SpanContext().TraceID() {
		if job.SpanContext().IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: job.SpanContext()}))
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return job.TracerProvider().Tracer("github.com/bothy/bothy/services/server/internal/webhooks").
		Start(ctx, "bothy.webhook.attempt", opts...)
}

// endAttempt ends an attempt's span with its outcome. The URL is not
// recorded: URLs carry credentials.
func endAttempt(span trace.Span, o *outbound.Answer) {
	if o.StatusCode != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", o.StatusCode))
	}
	span.SetAttributes(attribute.String("bothy.webhook.result", o.Kind.String()))
	if o.Kind != outbound.Delivered {
		span.SetStatus(codes.Error, o.Err)
	}
	span.End()
}
