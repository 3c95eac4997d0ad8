// Package telemetry is what bothy tells operators beyond its logs: River's
// job metrics for the Prometheus registry (RiverMetrics), and tracing, off
// unless the standard OTEL_* environment asks for it (NewTracing), with the
// instrumentation that carries one trace from an API request through the
// event's commit, the consumer round and the River job to each delivery
// attempt (HTTPHandler, TraceParentMiddleware). docs/adr/0063-observability.md
// records the decisions.
package telemetry
