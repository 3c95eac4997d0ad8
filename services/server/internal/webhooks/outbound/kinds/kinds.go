// Package kinds is the registry of destination kinds: wiring a kind is one
// line here, naming its package's ParseConfig and NewPool.
package kinds

import (
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/httpdest"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/rabbitmq"
)

// All are the destination kinds a subscription may name.
var All = outbound.Kinds{
	outbound.KindHTTP: httpdest.Driver,
	"rabbitmq":        outbound.NewDriver(rabbitmq.ParseConfig, rabbitmq.NewPool),
}
