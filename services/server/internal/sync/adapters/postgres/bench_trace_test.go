package postgres_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// otlpSink is a local OTLP/HTTP receiver that accepts every export and
// keeps nothing but a byte count: what tracing costs the process that
// exports, without a collector's own work on the same machine.
type otlpSink struct {
	srv   *httptest.Server
	bytes atomic.Int64
}

func newOTLPSink(tb testing.TB) *otlpSink {
	tb.Helper()
	s := &otlpSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	tb.Cleanup(s.srv.Close)
	return s
}

// tracedProvider is the SDK as "bothy server" configures it with an OTLP
// endpoint (batch span processor, OTLP/HTTP exporter, parent-based
// always-on sampling), exporting to sink.
func tracedProvider(tb testing.TB, sink *otlpSink) trace.TracerProvider {
	tb.Helper()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(sink.srv.URL+"/v1/traces"))
	if err != nil {
		tb.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}
