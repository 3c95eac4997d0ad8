package app

import (
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/console"
	"github.com/bothy/bothy/services/server/internal/eventtypes"
	"github.com/bothy/bothy/services/server/internal/httpapi"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/delivery"
)

// Features are the modules every bothy server runs, configured from cfg:
// outgoing webhooks, push, the catalog of event types, the HTTP API and,
// if console.enabled, the web console. A new feature is added here.
func Features(cfg *config.Config) []module.Factory {
	fs := []module.Factory{
		delivery.NewModule(WebhooksConfig(cfg)),
		push.NewModule(PushConfig(cfg)),
		eventtypes.NewModule(),
		httpapi.NewModule(APIConfig(cfg)),
	}
	if cfg.Console.Enabled {
		fs = append(fs, console.NewModule(ConsoleConfig(cfg)))
	}
	return fs
}

// ConsoleConfig maps console.* onto the web console.
func ConsoleConfig(cfg *config.Config) *console.Config {
	c := cfg.Console
	return &console.Config{Key: []byte(c.Key), FrameAncestors: c.FrameAncestors, SessionTTL: c.SessionTTL,
		SecureCookies: c.SecureCookies}
}

// WebhooksConfig maps webhooks.* onto the webhooks module.
func WebhooksConfig(cfg *config.Config) *delivery.ModuleConfig {
	w := cfg.Webhooks
	return &delivery.ModuleConfig{
		Deliver: delivery.DeliverConfig{
			AllowPrivateTargets: w.AllowPrivateTargets,
			Timeout:             w.Timeout,
			RetryBudget:         w.RetryBudget,
			MaxResponseBytes:    w.MaxResponseBytes,
			BatchSize:           w.BatchSize,
			RightsMaxAge:        w.RightsMaxAge,
			Senders:             w.Senders,
			Linger:              w.SenderLinger,
			RescueAfter:         cfg.River.RescueStuckJobsAfter,
		},
		KeepFinished: cfg.Sync.EventRetention,
	}
}

// WebhookLimits maps webhooks.max_* onto webhooks.Limits.
func WebhookLimits(cfg *config.Config) webhooks.Limits {
	w := cfg.Webhooks
	return webhooks.Limits{MaxEventTypes: w.MaxEventTypes, MaxSubscriptionsPerSpace: w.MaxSubscriptionsPerSpace,
		MaxSubscriptionsPerOwner: w.MaxSubscriptionsPerOwner, EventRetention: cfg.Sync.EventRetention}
}

// PushConfig maps push.* onto the push module.
func PushConfig(cfg *config.Config) *push.ModuleConfig {
	p := cfg.Push
	return &push.ModuleConfig{
		Deliver: push.DeliverConfig{
			VAPIDPublicKey: p.VAPIDPublicKey, VAPIDPrivateKey: p.VAPIDPrivateKey, VAPIDSubject: p.VAPIDSubject,
			TTL: p.TTL, Urgency: p.Urgency, AllowPrivateTargets: p.AllowPrivateTargets, OriginConcurrency: p.OriginConcurrency,
			RightsMaxAge: p.RightsMaxAge,
		},
		Consumer: push.ConsumerConfig{BatchSize: p.BatchSize},
	}
}

// APIConfig maps the keys the HTTP API reads onto its configuration.
func APIConfig(cfg *config.Config) *httpapi.Config {
	return &httpapi.Config{
		AllowPrivateWebhookTargets: cfg.Webhooks.AllowPrivateTargets,
		WebhookLimits:              WebhookLimits(cfg),
		WebhookTimeout:             cfg.Webhooks.Timeout,
		AllowPrivatePushEndpoints:  cfg.Push.AllowPrivateTargets,
		VAPIDPublicKey:             cfg.Push.VAPIDPublicKey,
		AdminToken:                 cfg.Server.AdminToken,
		AuthCacheTTL:               cfg.Server.AuthCacheTTL,
		ConsoleKey:                 consoleKey(cfg),
		ConsolePublicURL:           cfg.Console.PublicURL,
		EventsPollInterval:         cfg.Consumer.PollInterval,
		MaxEventWaitersPerToken:    cfg.Server.MaxEventWaitersPerToken,
		MaxEventWaiters:            cfg.Server.MaxEventWaiters,
		EventsStreamWriteTimeout:   cfg.Server.EventStreamWriteTimeout,
	}
}

// consoleKey is console.key while the console is on.
func consoleKey(cfg *config.Config) []byte {
	if !cfg.Console.Enabled {
		return nil
	}
	return []byte(cfg.Console.Key)
}
