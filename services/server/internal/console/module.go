package console

import (
	"cmp"
	"net/http"

	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// consoleModule adapts Console to module.Module: it only has routes, on
// the api role, and serves its pages from the API the same mux mounts.
type consoleModule struct {
	console *Console
}

// NewModule returns the factory of the console. A bad configuration (a
// missing or short console.key) fails the factory, so the server refuses
// to start and names the key.
func NewModule(cfg *Config) module.Factory {
	return func(d *module.Deps) (module.Module, error) {
		c := *cfg
		c.Logger = cmp.Or(c.Logger, d.Logger)
		// The API handler is set in Routes: it is the mux the API is
		// mounted on.
		con, err := New(d.Pool, nil, &c)
		if err != nil {
			return nil, err
		}
		return &consoleModule{console: con}, nil
	}
}

func (*consoleModule) Consumers() []sync.Consumer                    { return nil }
func (*consoleModule) RegisterWorkers(*river.Workers) []module.Queue { return nil }

// Routes mounts the console; its pages call the API through mux, so they
// see every /v1 route whatever the order modules mount in.
func (m *consoleModule) Routes(mux *http.ServeMux) {
	m.console.api = mux
	m.console.Routes(mux)
}
