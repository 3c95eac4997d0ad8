package dbconn

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// RoundTrips counts a pool's round trips to PostgreSQL as
// bothy_database_round_trips_total, by kind: a query or exec (BEGIN and
// COMMIT each are one), a batch (one however many statements it holds), a
// COPY, a statement preparation that went to the server, a new connection.
// A process's round trips per unit of work are what its CPU and latency
// follow on a busy host. It is a pgx tracer, safe for concurrent use.
type RoundTrips struct {
	query, batch, copy, prepare, connect prometheus.Counter
}

var (
	_ pgx.QueryTracer    = (*RoundTrips)(nil)
	_ pgx.BatchTracer    = (*RoundTrips)(nil)
	_ pgx.CopyFromTracer = (*RoundTrips)(nil)
	_ pgx.PrepareTracer  = (*RoundTrips)(nil)
	_ pgx.ConnectTracer  = (*RoundTrips)(nil)
)

// NewRoundTrips returns the counter, registered on reg.
func NewRoundTrips(reg prometheus.Registerer) *RoundTrips {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bothy_database_round_trips_total",
		Help: "Round trips of the process's pool to PostgreSQL, by kind: query (each statement sent alone, BEGIN and COMMIT included), batch (a pipeline of statements), copy, prepare, connect.",
	}, []string{"kind"})
	reg.MustRegister(v)
	return &RoundTrips{query: v.WithLabelValues("query"), batch: v.WithLabelValues("batch"), copy: v.WithLabelValues("copy"),
		prepare: v.WithLabelValues("prepare"), connect: v.WithLabelValues("connect")}
}

// Install makes pc's connections count their round trips in r.
func (r *RoundTrips) Install(pc *pgxpool.Config) { pc.ConnConfig.Tracer = r }

func (r *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.query.Inc()
	return ctx
}

func (*RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.batch.Inc()
	return ctx
}

func (*RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *RoundTrips) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	r.copy.Inc()
	return ctx
}

func (*RoundTrips) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func (r *RoundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	r.prepare.Inc()
	return ctx
}

func (*RoundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (r *RoundTrips) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	r.connect.Inc()
	return ctx
}

func (*RoundTrips) TraceConnectEnd(context.Context, pgx.TraceConnectEndData) {}
