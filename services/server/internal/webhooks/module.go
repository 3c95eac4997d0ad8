package webhooks

import (
	"net"
	"net/http"
	"time"

	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/sync"
)

var defaultResolver Resolver = net.DefaultResolver

// Module plugs outgoing webhooks into the server: the webhooks consumer in
// the worker role, the webhook_out.deliver worker on queue "webhooks", and
// the hourly pruning of finished delivery records.
type Module struct {
	consumer  *Consumer
	deliverer *Deliverer
	pruner    *pruneWorker
}

// NewModule is the app.ModuleFactory of outgoing webhooks.
func NewModule(d *app.Deps) (app.Module, error) {
	w := d.Config.Webhooks
	metrics := NewMetrics(d.Registry, d.Pool, d.Logger)
	del, err := NewDeliverer(d.Pool, metrics, &DeliverConfig{
		AllowPrivateTargets: w.AllowPrivateTargets,
		Timeout:             w.Timeout,
		RetryBudget:         w.RetryBudget,
		MaxResponseBytes:    w.MaxResponseBytes,
		Logger:              d.Logger,
	})
	if err != nil {
		return nil, err
	}
	return &Module{consumer: NewConsumer(), deliverer: del, pruner: &pruneWorker{db: d.Pool, keep: d.Config.Sync.EventRetention}}, nil
}

// Consumers implements app.Module.
func (m *Module) Consumers() []sync.Consumer { return []sync.Consumer{m.consumer} }

// RegisterWorkers implements app.Module.
func (m *Module) RegisterWorkers(w *river.Workers) []string {
	river.AddWorker(w, m.deliverer)
	river.AddWorker(w, m.pruner)
	return []string{Queue}
}

// PeriodicJobs implements app.PeriodicModule: finished delivery records are
// pruned hourly once they are older than sync.event_retention.
func (m *Module) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return PruneArgs{}, nil }, nil)}
}

// Routes implements app.Module; the owner's HTTP API comes later (the CLI
// covers the commands for now).
func (m *Module) Routes(*http.ServeMux) {}
