package push

import (
	"encoding/json"
	"net/http"

	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// Module plugs push into the server: the consumer and the push.deliver
// worker in the worker role, the VAPID public key on the api role.
type Module struct {
	consumer  *Consumer
	worker    *DeliverWorker
	publicKey string
}

// NewModule builds the module from the configuration (push.*). Without
// VAPID keys push is off: the consumer still advances its cursor, so its
// lag stays zero, but creates no jobs. Keys that do not form a pair stop
// the server at start.
func NewModule(d *app.Deps) (app.Module, error) {
	pc := d.Config.Push
	m := &Module{}
	if pc.VAPIDPublicKey == "" && pc.VAPIDPrivateKey == "" {
		d.Logger.Warn("push is off: push.vapid_public_key and push.vapid_private_key are not set (bothy push vapid-keys)")
		m.consumer = NewConsumer(&ConsumerConfig{Disabled: true})
		return m, nil
	}
	w, err := NewDeliverWorker(d.Pool, &DeliverConfig{
		VAPIDPublicKey: pc.VAPIDPublicKey, VAPIDPrivateKey: pc.VAPIDPrivateKey, VAPIDSubject: pc.VAPIDSubject,
		TTL: pc.TTL, Urgency: pc.Urgency, AllowPrivateTargets: pc.AllowPrivateTargets,
		Logger: d.Logger, Metrics: NewMetrics(d.Registry),
	})
	if err != nil {
		return nil, err
	}
	m.consumer, m.worker, m.publicKey = NewConsumer(nil), w, pc.VAPIDPublicKey
	return m, nil
}

// Consumers implements app.Module.
func (m *Module) Consumers() []sync.Consumer { return []sync.Consumer{m.consumer} }

// RegisterWorkers implements app.Module.
func (m *Module) RegisterWorkers(w *river.Workers) []string {
	if m.worker == nil {
		return nil
	}
	river.AddWorker(w, m.worker)
	return []string{Queue}
}

// Routes implements app.Module: clients need the public key as
// applicationServerKey when they subscribe.
func (m *Module) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/push/vapid-public-key", func(w http.ResponseWriter, r *http.Request) {
		if m.publicKey == "" {
			http.Error(w, "push notifications are not configured", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"public_key": m.publicKey})
	})
}
