package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracingConfig configures NewTracing.
type TracingConfig struct {
	// Getenv reads the variables that turn tracing on or off (see
	// NewTracing). Default os.Getenv. The OTLP exporter itself reads its
	// OTEL_EXPORTER_OTLP_* settings from the process's environment.
	Getenv func(string) string
	// Exporter, if set, receives the spans instead of an OTLP exporter, and
	// tracing is on whatever the environment says (tests, benchmarks).
	// Default nil.
	Exporter sdktrace.SpanExporter
	// Attributes are added to the resource that the environment
	// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) describes; service.name
	// is "bothy" unless the environment names it. Default none.
	Attributes []attribute.KeyValue
	// Logger receives the SDK's errors (an unreachable collector).
	// Default slog.Default().
	Logger *slog.Logger
}

// Tracing is the process's tracer provider: the OpenTelemetry SDK batching
// spans to an OTLP/HTTP collector when tracing is on, a no-op provider
// otherwise.
type Tracing struct {
	provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider
}

// NewTracing configures tracing from the standard OpenTelemetry
// environment. It is off unless OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, or OTEL_TRACES_EXPORTER is
// otlp; OTEL_TRACES_EXPORTER=none and OTEL_SDK_DISABLED=true turn it off.
// The exporter speaks OTLP over HTTP with protobuf; another exporter or
// protocol asked for is an error, not a silent default. The SDK reads the
// rest itself: OTEL_EXPORTER_OTLP_* (endpoint, headers, timeout, TLS),
// OTEL_TRACES_SAMPLER and its argument (default: parent-based, always on),
// OTEL_BSP_* (the batch span processor) and OTEL_SPAN_*_LIMIT.
func NewTracing(ctx context.Context, cfg *TracingConfig) (*Tracing, error) {
	c := TracingConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	exp := c.Exporter
	if exp == nil {
		on, err := tracingWanted(c.Getenv)
		if err != nil || !on {
			return &Tracing{provider: noop.NewTracerProvider()}, err
		}
		if exp, err = otlptracehttp.New(ctx); err != nil {
			return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
		}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(append([]attribute.KeyValue{attribute.String("service.name", "bothy")}, c.Attributes...)...),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	logger := c.Logger
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("tracing", slog.Any("error", err))
	}))
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{provider: sdk, sdk: sdk}, nil
}

// tracingWanted reads the variables that turn tracing on.
func tracingWanted(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	on := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	switch e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e {
	case "":
	case "none":
		return false, nil
	case "otlp":
		on = true
	default:
		return false, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%s: bothy exports traces with otlp only (or none)", e)
	}
	if !on {
		return false, nil
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return false, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL=%s: bothy exports traces with http/protobuf only", proto)
	}
	return true, nil
}

// NewTracingWith returns tracing through provider, which the caller owns
// (tests and benchmarks, with an in-memory exporter); Shutdown leaves it
// alone.
func NewTracingWith(provider trace.TracerProvider) *Tracing {
	return &Tracing{provider: provider}
}

// Provider is the tracer provider every part of the process traces with.
func (t *Tracing) Provider() trace.TracerProvider { return t.provider }

// Enabled reports whether spans are recorded and exported.
func (t *Tracing) Enabled() bool {
	_, off := t.provider.(noop.TracerProvider)
	return !off
}

// Shutdown exports the spans still buffered and stops the exporter; ctx
// bounds how long it waits for the collector.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	if err := t.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// quietPaths are not traced: probes and scrapes every few seconds.
var quietPaths = map[string]bool{"/metrics": true, "/healthz": true, "/readyz": true}

// HTTPHandler traces every request next serves, but the probes and
// /metrics, with otelhttp: a server span per request, the child of the
// client's span when the request carries a W3C traceparent. The access log
// (package accesslog) inside it names the span after the route pattern.
// With tracing off it records nothing but still takes the client's W3C
// traceparent into the request's context, so the events the request
// appends carry it to their webhook receivers unchanged.
func (t *Tracing) HTTPHandler(next http.Handler) http.Handler {
	if !t.Enabled() {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("traceparent") != "" {
				r = r.WithContext(propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
			}
			next.ServeHTTP(w, r)
		})
	}
	return otelhttp.NewHandler(next, "bothy.http",
		otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithFilter(func(r *http.Request) bool { return !quietPaths[r.URL.Path] }),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}
