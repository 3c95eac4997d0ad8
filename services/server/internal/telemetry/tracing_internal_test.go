package telemetry

import (
	"context"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/bothy/bothy/services/server/internal/sync"
)

func TestTracingWanted_ReadsTheStandardEnvironment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		on   bool
		err  string
	}{
		{name: "OffByDefault"},
		{name: "OnWithAnEndpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, on: true},
		{name: "OnWithATracesEndpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, on: true},
		{name: "OnWithTheOTLPExporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "OffWithTheNoneExporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "OffWhenTheSDKIsDisabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "RefusesAnotherExporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "otlp only"},
		{name: "RefusesGRPC", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: "http/protobuf only"},
		{name: "AcceptsHTTPProtobuf", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			on, err := tracingWanted(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.on, on)
		})
	}
}

func TestNewTracing_OffIsANoOp(t *testing.T) {
	t.Parallel()
	tr, err := NewTracing(context.Background(), &TracingConfig{Getenv: func(string) string { return "" }})
	require.NoError(t, err)
	require.False(t, tr.Enabled())
	require.Empty(t, tr.RiverMiddleware())
	require.NoError(t, tr.Shutdown(context.Background()))
}

func TestTraceParentMiddleware_CarriesTraceContextThroughJobs(t *testing.T) {
	t.Parallel()
	const stored = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	inserting := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	m := &TraceParentMiddleware{}

	t.Run("InsertAddsTheInsertingSpanUnlessSet", func(t *testing.T) {
		params := []*rivertype.JobInsertParams{{Metadata: []byte(`{}`)}, {Metadata: []byte(`{"traceparent":"` + stored + `","x":1}`)}, {}}
		ctx := trace.ContextWithSpanContext(context.Background(), inserting)
		_, err := m.InsertMany(ctx, params, func(context.Context) ([]*rivertype.JobInsertResult, error) { return nil, nil })
		require.NoError(t, err)
		require.JSONEq(t, `{"traceparent":"`+sync.FormatTraceParent(inserting)+`"}`, string(params[0].Metadata))
		require.JSONEq(t, `{"traceparent":"`+stored+`","x":1}`, string(params[1].Metadata), "a round's event context stays")
		require.JSONEq(t, `{"traceparent":"`+sync.FormatTraceParent(inserting)+`"}`, string(params[2].Metadata))
	})

	t.Run("InsertWithoutASpanChangesNothing", func(t *testing.T) {
		params := []*rivertype.JobInsertParams{{Metadata: []byte(`{}`)}}
		_, err := m.InsertMany(context.Background(), params, func(context.Context) ([]*rivertype.JobInsertResult, error) { return nil, nil })
		require.NoError(t, err)
		require.Equal(t, `{}`, string(params[0].Metadata))
	})

	t.Run("WorkRunsInTheJobsTrace", func(t *testing.T) {
		var inner trace.SpanContext
		err := m.Work(context.Background(), &rivertype.JobRow{Metadata: []byte(`{"traceparent":"` + stored + `"}`)}, func(ctx context.Context) error {
			inner = trace.SpanContextFromContext(ctx)
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, stored, sync.FormatTraceParent(inner))
		require.True(t, inner.IsRemote())

		for _, bad := range []string{`{}`, `{"traceparent":"garbage"}`, `not json "traceparent"`} {
			err := m.Work(context.Background(), &rivertype.JobRow{Metadata: []byte(bad)}, func(ctx context.Context) error {
				require.False(t, trace.SpanContextFromContext(ctx).IsValid(), "%s", bad)
				return nil
			})
			require.NoError(t, err)
		}
	})
}
