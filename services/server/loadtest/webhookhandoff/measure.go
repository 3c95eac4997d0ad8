package webhookhandoff

import (
	"context"
	"fmt"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/dbconn"
	"github.com/bothy/bothy/services/server/internal/dburl"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	webhookdelivery "github.com/bothy/bothy/services/server/internal/webhooks/delivery"
	"github.com/bothy/bothy/services/server/loadtest/cost"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// costs measures what the worker costs over one window.
type costs struct {
	db    *cost.Database
	trips *dbconn.RoundTrips
	meter *cost.Meter
}

// startCosts opens the window before the worker starts: it closes the load
// test's own sessions on the scratch database and waits until there are
// none, so every transaction the window counts is the worker's (and, in the
// hand-off mode, the producer's).
func (h *handoff) startCosts(ctx context.Context) (*costs, error) {
	h.scratch.Disconnect()
	admin, err := dburl.WithDatabase(h.scratch.URL, "postgres")
	if err != nil {
		return nil, err
	}
	db, err := cost.OpenDatabase(ctx, admin, dburl.Name(h.scratch.URL))
	if err != nil {
		return nil, err
	}
	c := &costs{db: db, trips: &dbconn.RoundTrips{}}
	p := &cost.MeterParams{DB: db, Trips: c.trips, Receiver: h.rcv.pid(), ScratchURL: h.scratch.URL,
		RiverKind: webhooks.KindDeliver, RiverKeeps: cost.RiverKeeps(app.RiverConfig(h.scratch.Cfg, h.scratch.Logger))}
	if h.private != nil {
		if p.Postmaster, err = h.private.PID(); err != nil {
			db.Close(ctx)
			return nil, err
		}
	}
	c.meter = cost.NewMeter(p)
	if err := c.meter.Start(ctx); err != nil {
		db.Close(ctx)
		return nil, fmt.Errorf("measure: %w", err)
	}
	return c, nil
}

func (c *costs) close(ctx context.Context) { c.db.Close(ctx) }

// startWorker runs the worker role with the webhooks module, its pool's
// round trips counted.
func (h *handoff) startWorker(ctx context.Context, c *costs) (*harness.Worker, error) {
	cfg := h.scratch.Cfg
	return harness.StartWorker(ctx, &harness.WorkerParams{Cfg: cfg, Logger: h.scratch.Logger,
		Modules: []module.Factory{webhookdelivery.NewModule(app.WebhooksConfig(cfg))}, PoolConfig: c.trips.Install})
}

// finish stops the worker and closes the window, which Mark ended for
// time, CPU and WAL.
func (c *costs) finish(ctx context.Context, w *harness.Worker) (*cost.Totals, error) {
	w.Stop()
	t, err := c.meter.Finish(ctx)
	if err != nil {
		return nil, fmt.Errorf("measure: %w", err)
	}
	return t, nil
}

// topStatements returns the statements that took the most time, when
// --statements asks and pg_stat_statements is loaded.
func (h *handoff) topStatements(ctx context.Context, c *costs) ([]cost.Statement, error) {
	if !h.opts.statements || !c.db.Statements {
		return nil, nil
	}
	return c.db.TopStatements(ctx, 40)
}
