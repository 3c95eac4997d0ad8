package harness

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/module"
)

// Worker is the worker role run in this process with the given modules:
// the composition "bothy server --role=worker" runs, on one clock with the
// producers and receivers.
type Worker struct {
	// Done receives what the server's Run returned, once.
	Done <-chan error
	// Addr is the address its HTTP server listens on.
	Addr string
	stop func()
}

// WorkerParams says how to run the worker role.
type WorkerParams struct {
	// Cfg is the server's configuration (Scratch.Cfg). Required.
	Cfg *config.Config
	// Logger receives the server's logs. Required.
	Logger *slog.Logger
	// Modules are the features it runs (webhooks, push).
	Modules []module.Factory
	// PoolConfig, if set, adjusts the server's pool configuration before it
	// connects (app.Server.ConfigurePool), such as a tracer counting its
	// round trips.
	PoolConfig func(*pgxpool.Config)
}

// StartWorker runs app.Server with p until Stop, and waits (at most 30 s)
// until it listens.
func StartWorker(ctx context.Context, p *WorkerParams) (*Worker, error) {
	sctx, cancel := context.WithCancel(ctx)
	srv := app.NewServer(p.Cfg, p.Logger, p.Modules)
	if p.PoolConfig != nil {
		srv.ConfigurePool(p.PoolConfig)
	}
	ran := make(chan error, 1)
	go func() {
		ran <- srv.Run(sctx)
		close(ran)
	}()
	w := &Worker{Done: ran, stop: func() {
		cancel()
		for range ran { // returns at once if Done was read already
		}
	}}
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	addr, err := srv.Addr(actx)
	acancel()
	if err != nil {
		w.Stop()
		return nil, fmt.Errorf("worker did not start: %w", err)
	}
	w.Addr = addr.String()
	return w, nil
}

// Stop stops the worker and waits for it; it may be called more than once.
func (w *Worker) Stop() { w.stop() }
