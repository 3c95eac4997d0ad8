package dbconn

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// RoundTrips is a pgx tracer that counts a pool's round trips to the
// server: every query or exec (BEGIN and COMMIT included, each is one), every
// batch as one (a pipeline is one round trip however many statements it
// holds), every COPY, every statement preparation that went to the server,
// every liveness ping of the pool and every new connection. A process's
// round trips per unit of work are what its CPU and latency follow on a
// busy host; Register exports them as bothy_database_round_trips_total.
// The zero value counts; it is safe for concurrent use.
type RoundTrips struct {
	queries, batches, copies, prepares, pings, connects atomic.Int64
}

var (
	_ pgx.QueryTracer    = (*RoundTrips)(nil)
	_ pgx.BatchTracer    = (*RoundTrips)(nil)
	_ pgx.CopyFromTracer = (*RoundTrips)(nil)
	_ pgx.PrepareTracer  = (*RoundTrips)(nil)
	_ pgx.ConnectTracer  = (*RoundTrips)(nil)
)

// Install makes pc's connections report to r, and counts the pings the
// pool sends on acquiring a connection that was idle (its ShouldPing rule,
// pgxpool's default when pc has none).
func (r *RoundTrips) Install(pc *pgxpool.Config) {
	pc.ConnConfig.Tracer = r
	should := pc.ShouldPing
	if should == nil {
		// pgxpool's default rule.
		should = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > time.Second }
	}
	pc.ShouldPing = func(ctx context.Context, p pgxpool.ShouldPingParams) bool {
		ping := should(ctx, p)
		if ping {
			r.pings.Add(1)
		}
		return ping
	}
}

// Register exports the counts on reg as bothy_database_round_trips_total,
// by kind.
func (r *RoundTrips) Register(reg prometheus.Registerer) {
	for _, k := range []struct {
		kind string
		n    *atomic.Int64
	}{{"query", &r.queries}, {"batch", &r.batches}, {"copy", &r.copies}, {"prepare", &r.prepares}, {"ping", &r.pings}, {"connect", &r.connects}} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "bothy_database_round_trips_total",
			Help:        "Round trips of the process's pool to PostgreSQL, by kind: query (each statement sent alone, BEGIN and COMMIT included), batch (a pipeline of statements), copy, prepare, ping, connect.",
			ConstLabels: prometheus.Labels{"kind": k.kind},
		}, func() float64 { return float64(k.n.Load()) }))
	}
}

// Total is the round trips counted so far; 0 for a nil r (nothing counted).
func (r *RoundTrips) Total() int64 {
	if r == nil {
		return 0
	}
	return r.queries.Load() + r.batches.Load() + r.copies.Load() + r.prepares.Load() + r.pings.Load() + r.connects.Load()
}

// String lists the counts by kind.
func (r *RoundTrips) String() string {
	if r == nil {
		return "not counted"
	}
	return fmt.Sprintf("%d queries, %d batches, %d copies, %d prepares, %d pings, %d connects",
		r.queries.Load(), r.batches.Load(), r.copies.Load(), r.prepares.Load(), r.pings.Load(), r.connects.Load())
}

// TraceQueryStart implements pgx.QueryTracer.
func (r *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.queries.Add(1)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (r *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart implements pgx.BatchTracer.
func (r *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.batches.Add(1)
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (r *RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (r *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TraceCopyFromStart implements pgx.CopyFromTracer.
func (r *RoundTrips) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	r.copies.Add(1)
	return ctx
}

// TraceCopyFromEnd implements pgx.CopyFromTracer.
func (r *RoundTrips) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// TracePrepareStart implements pgx.PrepareTracer.
func (r *RoundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return ctx
}

// TracePrepareEnd implements pgx.PrepareTracer: a statement the
// connection had prepared already cost no round trip.
func (r *RoundTrips) TracePrepareEnd(_ context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	if !d.AlreadyPrepared {
		r.prepares.Add(1)
	}
}

// TraceConnectStart implements pgx.ConnectTracer.
func (r *RoundTrips) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	r.connects.Add(1)
	return ctx
}

// TraceConnectEnd implements pgx.ConnectTracer.
func (r *RoundTrips) TraceConnectEnd(context.Context, pgx.TraceConnectEndData) {}
