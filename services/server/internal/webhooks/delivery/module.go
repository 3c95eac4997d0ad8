package delivery

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// ModuleConfig configures the webhooks module.
type ModuleConfig struct {
	// Deliver configures the delivery worker.
	Deliver DeliverConfig
	// KeepFinished is how long finished delivery records are kept
	// (sync.event_retention: as long as their events).
	KeepFinished time.Duration
}

// Module plugs outgoing webhooks into the server: the webhooks consumer in
// the worker role, the webhook_out.deliver worker on queue "webhooks", the
// webhook_out.notice worker that appends operational events to the log,
// and the hourly pruning of finished delivery records.
type Module struct {
	consumer  *webhooks.Consumer
	deliverer *Deliverer
	// records is the recorder's own pool (DeliverConfig.Records).
	records *pgxpool.Pool
	notices *webhooks.NoticeWorker
	pruner  river.Worker[webhooks.PruneArgs]
}

// NewModule returns the factory of outgoing webhooks.
func NewModule(cfg *ModuleConfig) module.Factory {
	return func(d *module.Deps) (module.Module, error) {
		dc := cfg.Deliver
		if dc.Logger == nil {
			dc.Logger = d.Logger
		}
		metrics := NewMetrics(d.Registry, d.Pool, d.Events, d.Logger)
		// The process's pool settings, with RecordConns connections; none
		// is opened before the first flush.
		rc := d.Pool.Config()
		rc.MaxConns, rc.MinConns, rc.MinIdleConns = RecordConns, 0, 0
		records, err := pgxpool.NewWithConfig(context.Background(), rc)
		if err != nil {
			return nil, fmt.Errorf("webhooks: recorder pool: %w", err)
		}
		dc.Records = records
		del, err := NewDeliverer(d.Pool, d.Source, metrics, &dc)
		if err != nil {
			records.Close()
			return nil, err
		}
		consumer := webhooks.NewConsumer(&webhooks.ConsumerConfig{LivenessSettle: dc.LivenessSettle, Local: del,
			ExpressionErrors: metrics.Expressions, Logger: d.Logger})
		return &Module{consumer: consumer, deliverer: del, records: records, notices: webhooks.NewNoticeWorker(d.Events),
			pruner: webhooks.NewPruneWorker(d.Pool, cfg.KeepFinished)}, nil
	}
}

// Consumers implements module.Module.
func (m *Module) Consumers() []sync.Consumer { return []sync.Consumer{m.consumer} }

// RegisterWorkers implements module.Module.
// The webhooks queue runs one job per subscription being sent for, most of
// them idle at any time, so it is sized by webhooks.senders.
func (m *Module) RegisterWorkers(w *river.Workers) []module.Queue {
	river.AddWorker(w, m.deliverer)
	river.AddWorker(w, m.notices)
	river.AddWorker(w, m.pruner)
	return []module.Queue{{Name: webhooks.Queue, MaxWorkers: m.deliverer.cfg.Senders}}
}

// Run implements module.Runner: when the server stops, idle senders end
// at once.
func (m *Module) Run(ctx context.Context) error { return m.deliverer.Run(ctx) }

// Notifications implements module.Notified: the rounds (and resends,
// recovers and enables) wake this process's senders through webhooks.WakeChannel.
func (m *Module) Notifications() map[string]func(string) {
	return map[string]func(string){webhooks.WakeChannel: m.deliverer.Wake}
}

// PeriodicJobs implements module.Periodic: finished delivery records are
// pruned hourly once they are older than KeepFinished.
func (m *Module) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return webhooks.PruneArgs{}, nil }, nil)}
}

// Routes implements module.Module; the HTTP API mounts the owner's routes.
func (m *Module) Routes(*http.ServeMux) {}

// Close implements module.Closer: it closes the recorder's connections.
func (m *Module) Close() {
	if m.records != nil {
		m.records.Close()
	}
}
