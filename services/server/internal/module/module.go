// Package module is the contract between bothy's features (webhooks, push,
// the HTTP API) and the server that runs them. A feature builds its parts
// from Deps and hands them to the server through Module; it never imports
// the server itself, so a feature depends on the framework's ports and on
// libraries only.
package module

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// Events is what features need of the event log: appending (the API's
// producers) and waiting until what was read is durable.
type Events interface {
	sync.Producer
	sync.DurabilityBarrier
}

// Deps is what a feature gets to build its parts. Every field is set.
type Deps struct {
	// Pool is the process's database pool, for the feature's own tables.
	Pool *pgxpool.Pool
	// Events appends to the log and flushes what was read.
	Events Events
	// Source reads events by seq, as rounds do.
	Source sync.EventSource
	// Rounds orders a transaction against a consumer's rounds.
	Rounds sync.RoundBarrier
	// ConsumerStatus reads every consumer's cursor and lag.
	ConsumerStatus sync.ConsumerStatusReader
	// Reader reads a space's events for clients that pull them.
	Reader sync.SpaceEventReader
	// Appended tells long polls and streams that the log may have grown:
	// the same NOTIFY event_log that wakes the consumers, heard by a LISTEN
	// connection in every role that serves the API.
	Appended sync.AppendWatcher
	// Logger is the process's logger.
	Logger *slog.Logger
	// Registry takes the feature's metrics.
	Registry prometheus.Registerer
	// Jobs inserts River jobs in a caller's transaction. It works once the
	// server's River client exists: from Routes and Run on, not while the
	// factory runs.
	Jobs JobInserter
}

// JobInserter inserts a River job inside the caller's transaction, so the
// job commits or rolls back with what it is about. It is safe for
// concurrent use; *river.Client[pgx.Tx] is one.
type JobInserter interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// Module is a feature that plugs into the server's roles. Its methods are
// called once, at start; any may return nothing.
type Module interface {
	// Consumers run in the worker role.
	Consumers() []sync.Consumer
	// RegisterWorkers adds River workers (worker role) and returns the
	// queues they need.
	RegisterWorkers(w *river.Workers) []Queue
	// Routes mounts HTTP handlers on the api role's mux; handlers insert
	// jobs with Deps.Jobs.
	Routes(mux *http.ServeMux)
}

// Queue is a River queue a module's workers need.
type Queue struct {
	Name string
	// MaxWorkers is how many of its jobs one process runs at once; 0 is
	// river.max_workers.
	MaxWorkers int
}

// Notified is an optional capability of a Module, found by type assertion:
// PostgreSQL notification channels it listens on in the worker role. The
// worker's listening connection LISTENs on each channel and calls its
// function with every notification's payload, and with "" after each
// (re)connect, since what was sent while nobody listened is lost. The
// functions must not block.
type Notified interface {
	Notifications() map[string]func(payload string)
}

// Periodic is an optional capability of a Module, found by type assertion:
// periodic jobs (pruning old rows, say) that the worker role's River client
// schedules. River runs them on its elected leader only.
type Periodic interface {
	PeriodicJobs() []*river.PeriodicJob
}

// Runner is an optional capability of a Module: background work that lives
// as long as the server. Run starts in every role, after Routes, and must
// return nil when ctx is cancelled.
type Runner interface {
	Run(ctx context.Context) error
}

// Closer is an optional capability of a Module: Close releases what the
// module opened for itself (connections of its own), after every part
// that could use it has stopped (River, the consumers, the runners) and
// before the process's pool closes.
type Closer interface {
	Close()
}

// Factory builds a module from its deps.
type Factory func(d *Deps) (Module, error)
