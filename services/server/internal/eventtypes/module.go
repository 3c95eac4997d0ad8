package eventtypes

import (
	"net/http"

	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// Module plugs the catalog's consumer into the worker role; the HTTP API
// reads the catalog (List).
type Module struct{}

// NewModule returns the factory of the catalog.
func NewModule() module.Factory {
	return func(*module.Deps) (module.Module, error) { return Module{}, nil }
}

// Consumers implements module.Module.
func (Module) Consumers() []sync.Consumer { return []sync.Consumer{Consumer{}} }

// RegisterWorkers implements module.Module: the consumer enqueues no jobs.
func (Module) RegisterWorkers(*river.Workers) []module.Queue { return nil }

// Routes implements module.Module: the HTTP API serves the catalog.
func (Module) Routes(*http.ServeMux) {}
