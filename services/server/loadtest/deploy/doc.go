// Package deploy runs bothy for a load test the way users run it: the
// built binary as separate "bothy server --role=api" and
// "--role=worker" processes on a PostgreSQL cluster of the load test's own,
// and producers that POST events over HTTP with a bearer token. It also
// measures what each part costs: the CPU time of each bothy process and of
// the PostgreSQL backends serving it, told apart by the application_name
// every bothy connection carries. Deployment holds one run's processes
// and their costs; Latencies and Quantiles are the figures the load tests
// report alike.
//
// The load tests (perf/webhook_handoff, perf/push_handoff) build on it for
// their default mode; their --in-process mode keeps the worker in the load
// test's own process, for profiling.
package deploy
