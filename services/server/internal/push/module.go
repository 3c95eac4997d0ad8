package push

import (
	"context"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// Module plugs push into the server: the consumer and the push.deliver
// and push.page workers in the worker role.
type Module struct {
	consumer *Consumer
	worker   *DeliverWorker
	pages    *PageWorker
	// records is the send log's own pool (DeliverConfig.Records).
	records *pgxpool.Pool
}

// ModuleConfig configures the push module. Without VAPID keys push is
// off: the consumer still advances its cursor, so its lag stays zero, but
// creates no jobs.
type ModuleConfig struct {
	Deliver  DeliverConfig
	Consumer ConsumerConfig
}

// NewModule returns the factory of push. Keys that do not form a pair stop
// the server at start.
func NewModule(cfg *ModuleConfig) module.Factory {
	return func(d *module.Deps) (module.Module, error) {
		m := &Module{}
		dc := cfg.Deliver
		if dc.VAPIDPublicKey == "" && dc.VAPIDPrivateKey == "" {
			d.Logger.Warn("push is off: push.vapid_public_key and push.vapid_private_key are not set (bothy push vapid-keys)")
			cc := cfg.Consumer
			cc.Disabled = true
			m.consumer = NewConsumer(&cc)
			return m, nil
		}
		dc.Logger, dc.Metrics = d.Logger, NewMetrics(d.Registry)
		// The process's pool settings, with RecordConns connections; none
		// is opened before the first record.
		rc := d.Pool.Config()
		rc.MaxConns, rc.MinConns, rc.MinIdleConns = RecordConns, 0, 0
		records, err := pgxpool.NewWithConfig(context.Background(), rc)
		if err != nil {
			return nil, fmt.Errorf("push: send log pool: %w", err)
		}
		dc.Records = records
		w, err := NewDeliverWorker(d.Pool, &dc)
		if err != nil {
			records.Close()
			return nil, err
		}
		m.records = records
		m.consumer, m.worker, m.pages = NewConsumer(&cfg.Consumer), w, NewPageWorker(d.Pool, &cfg.Consumer)
		return m, nil
	}
}

// Consumers implements module.Module.
func (m *Module) Consumers() []sync.Consumer { return []sync.Consumer{m.consumer} }

// RegisterWorkers implements module.Module.
func (m *Module) RegisterWorkers(w *river.Workers) []module.Queue {
	if m.worker == nil {
		return nil
	}
	river.AddWorker(w, m.worker)
	river.AddWorker(w, m.pages)
	return []module.Queue{{Name: Queue}}
}

// Routes implements module.Module: push has no routes of its own; the
// HTTP API serves its public key and registrations.
func (*Module) Routes(*http.ServeMux) {}

// Close implements module.Closer: it closes the send log's connections.
func (m *Module) Close() {
	if m.records != nil {
		m.records.Close()
	}
}
