package telemetry

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// RiverMiddleware is the River middleware of tracing, for every River
// client of the process, in this order: TraceParentMiddleware, then
// otelriver's (a span per insert batch and per job run, named
// river.work/KIND; its metrics go nowhere, RiverMetrics has ours). With
// tracing off it is empty.
func (t *Tracing) RiverMiddleware() []rivertype.Middleware {
	if !t.Enabled() {
		return nil
	}
	return []rivertype.Middleware{
		&TraceParentMiddleware{},
		otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
			TracerProvider: t.provider, MeterProvider: metricnoop.NewMeterProvider(), EnableWorkSpanJobKindSuffix: true,
		}),
	}
}

// TraceParentMiddleware carries trace context through River jobs in their
// metadata, under "traceparent" as otelriver names it. On insert, a job
// whose metadata has none gets the inserting span's (a job a request
// inserts joins the request's trace); a round has already set the
// producer's on the jobs of an event (sync.EventArgs). On work, the job's
// trace context becomes the parent of the spans inside, otelriver's work
// span first: a job is a step of the trace that caused it, retries
// included, not a trace of its own that merely links back (otelriver's own
// propagation, which also overwrites what a round set).
type TraceParentMiddleware struct {
	river.MiddlewareDefaults
}

var (
	_ rivertype.JobInsertMiddleware = (*TraceParentMiddleware)(nil)
	_ rivertype.WorkerMiddleware    = (*TraceParentMiddleware)(nil)
)

// InsertMany implements rivertype.JobInsertMiddleware.
func (*TraceParentMiddleware) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams,
	doInner func(context.Context) ([]*rivertype.JobInsertResult, error),
) ([]*rivertype.JobInsertResult, error) {
	if tp := sync.FormatTraceParent(trace.SpanContextFromContext(ctx)); tp != "" {
		for _, p := range params {
			p.Metadata = withTraceParent(p.Metadata, tp)
		}
	}
	return doInner(ctx)
}

// Work implements rivertype.WorkerMiddleware.
func (*TraceParentMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if sc, ok := JobTraceParent(job.Metadata); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return doInner(ctx)
}

var traceParentKey = []byte(`"traceparent"`)

// withTraceParent returns metadata with tp under "traceparent" unless it
// has one; metadata that is not a JSON object is left alone.
func withTraceParent(metadata []byte, tp string) []byte {
	if bytes.Contains(metadata, traceParentKey) {
		return metadata
	}
	m := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(metadata)) > 0 {
		if err := json.Unmarshal(metadata, &m); err != nil {
			return metadata
		}
	}
	m["traceparent"], _ = json.Marshal(tp)
	out, err := json.Marshal(m)
	if err != nil {
		return metadata
	}
	return out
}

// JobTraceParent reads the trace context from a job's metadata; false if
// there is none or it is not a valid W3C traceparent.
func JobTraceParent(metadata []byte) (trace.SpanContext, bool) {
	if !bytes.Contains(metadata, traceParentKey) {
		return trace.SpanContext{}, false
	}
	var m struct {
		TraceParent string `json:"traceparent"`
	}
	if err := json.Unmarshal(metadata, &m); err != nil {
		return trace.SpanContext{}, false
	}
	return sync.ParseTraceParent(m.TraceParent)
}
