package webhooks

import (
	"net"
	"net/http"

	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/sync"
)

var defaultResolver Resolver = net.DefaultResolver

// Module plugs outgoing webhooks into the server: the webhooks consumer in
// the worker role and the webhook_out.deliver worker on queue "webhooks".
type Module struct {
	consumer  *Consumer
	deliverer *Deliverer
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
	return &Module{consumer: NewConsumer(), deliverer: del}, nil
}

// Consumers implements app.Module.
func (m *Module) Consumers() []sync.Consumer { return []sync.Consumer{m.consumer} }

// RegisterWorkers implements app.Module.
func (m *Module) RegisterWorkers(w *river.Workers) []string {
	river.AddWorker(w, m.deliverer)
	return []string{Queue}
}

// Routes implements app.Module; the owner's HTTP API comes later (the CLI
// covers the commands for now).
func (m *Module) Routes(*http.ServeMux) {}
