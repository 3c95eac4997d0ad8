package push

import (
	"encoding/json"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// Module plugs push into the server: the consumer and the push.deliver
// worker in the worker role, the VAPID public key on the api role.
type Module struct {
	consumer  *Consumer
	worker    *DeliverWorker
	publicKey string
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
		w, err := NewDeliverWorker(d.Pool, &dc)
		if err != nil {
			return nil, err
		}
		m.consumer, m.worker, m.publicKey = NewConsumer(&cfg.Consumer), w, dc.VAPIDPublicKey
		return m, nil
	}
}

// Consumers implements module.Module.
func (m *Module) Consumers() []sync.Consumer { return []sync.Consumer{m.consumer} }

// RegisterWorkers implements module.Module.
func (m *Module) RegisterWorkers(w *river.Workers) []string {
	if m.worker == nil {
		return nil
	}
	river.AddWorker(w, m.worker)
	return []string{Queue}
}

// Routes implements module.Module: clients need the public key as
// applicationServerKey when they subscribe.
func (m *Module) Routes(mux *http.ServeMux, _ *river.Client[pgx.Tx]) {
	mux.HandleFunc("GET /v1/push/vapid-public-key", func(w http.ResponseWriter, r *http.Request) {
		if m.publicKey == "" {
			notConfigured(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"public_key": m.publicKey})
	})
}

// notConfigured answers the key's route while push is not configured: a
// problem document like every other error of the API.
func notConfigured(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "/v1/problems/not-found", "title": "Not Found", "status": http.StatusNotFound,
		"detail": "push notifications are not configured (push.vapid_public_key)", "instance": r.URL.Path,
	})
}
