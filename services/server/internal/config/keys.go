package config

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Key declares one configuration key.
type Key struct {
	// Name is the dotted key, such as consumer.batch_size.
	Name string
	// Default is the value when no source sets it.
	Default string
	// Range describes the accepted values, for errors and docs.
	Range string
	// Doc says what the key does.
	Doc string
	// Secret keys are never printed.
	Secret bool
	set    func(c *Config, v string) error
}

// Keys is every configuration key, in documentation order.
var Keys = []Key{
	{Name: "database.url", Default: "postgres://postgres@127.0.0.1:5432/bothy?sslmode=disable",
		Range: "a postgres:// URL", Doc: "PostgreSQL to use; the database is created by migrate if it is missing.",
		set: func(c *Config, v string) error { return str(&c.Database.URL, v, validDBURL) }},
	{Name: "database.max_conns", Default: "20", Range: "2..1000",
		Doc: "Connections in the pool of each process (on top come the LISTEN connection, a worker's liveness session and, with push on, the push send log's two).",
		set: func(c *Config, v string) error { return intIn(&c.Database.MaxConns, v, 2, 1000) }},
	{Name: "database.start_wait", Default: "0s", Range: "0s..8760h (0s: no limit)",
		Doc: "How long a starting bothy server waits for a database it cannot reach (refused, timed out, starting up) before it exits 1; meanwhile /healthz answers ok and /readyz 503. 0s waits as long as it takes. A database that refuses the configuration (password, database name, TLS) stops the server at once.",
		set: func(c *Config, v string) error { return dur(&c.Database.StartWait, v, 0, 8760*time.Hour) }},
	{Name: "database.expect_synchronous_standby", Default: "false", Range: "true or false",
		Doc: "The database has a synchronous standby (ops/high-availability.md); BothyDatabaseNoSynchronousStandby fires when none is in sync.",
		set: func(c *Config, v string) error { return boolean(&c.Database.ExpectSynchronousStandby, v) }},

	{Name: "server.role", Default: "all", Range: "api, worker or all",
		Doc: "What bothy server runs: api (HTTP API, metrics), worker (consumers, delivery jobs, maintenance) or all.",
		set: func(c *Config, v string) error { return oneOf(&c.Server.Role, v, "api", "worker", "all") }},
	{Name: "server.listen_addr", Default: "127.0.0.1:8080", Range: "host:port",
		Doc: "Address of the HTTP server (/v1, /metrics, /healthz, /readyz).",
		set: func(c *Config, v string) error { return str(&c.Server.ListenAddr, v, validAddr) }},
	{Name: "server.shutdown_timeout", Default: "30s", Range: "1s..10m",
		Doc: "How long a stopping server waits for in-flight work before it gives up.",
		set: func(c *Config, v string) error { return dur(&c.Server.ShutdownTimeout, v, time.Second, 10*time.Minute) }},
	{Name: "server.migrate", Default: "false", Range: "true or false",
		Doc: "Apply pending migrations before starting.",
		set: func(c *Config, v string) error { return boolean(&c.Server.Migrate, v) }},
	{Name: "server.auth_cache_ttl", Default: "1s", Range: "0s..1m",
		Doc: "How long the api reuses a bearer token's principal and scopes and a principal's right on a space once read; a revoked token, a disabled principal or a removed right stops being honoured within it (at once for changes made through the same api process). 0s reads them for every request.",
		set: func(c *Config, v string) error { return dur(&c.Server.AuthCacheTTL, v, 0, time.Minute) }},
	{Name: "server.admin_token", Default: "", Range: "empty or at least 16 characters", Secret: true,
		Doc: "Bearer token for the admin paths (River UI); empty disables them.",
		set: func(c *Config, v string) error {
			return str(&c.Server.AdminToken, v, func(s string) error {
				if s != "" && len(s) < 16 {
					return fmt.Errorf("too short")
				}
				return nil
			})
		}},
	{Name: "server.max_event_waiters_per_token", Default: "100", Range: "1..100000, at most server.max_event_waiters",
		Doc: "Most long polls (wait=) and event streams one token may have open in one api process; one more is answered 429 with Retry-After.",
		set: func(c *Config, v string) error { return intIn(&c.Server.MaxEventWaitersPerToken, v, 1, 100000) }},
	{Name: "server.max_event_waiters", Default: "10000", Range: "1..1000000",
		Doc: "Most long polls and event streams one api process keeps open, of all tokens; one more is answered 429 with Retry-After.",
		set: func(c *Config, v string) error { return intIn(&c.Server.MaxEventWaiters, v, 1, 1000000) }},
	{Name: "server.event_stream_write_timeout", Default: "30s", Range: "100ms..1h",
		Doc: "An event stream whose writes make no progress for this long (a client that stopped reading) is closed; the client reconnects with Last-Event-ID.",
		set: func(c *Config, v string) error {
			return dur(&c.Server.EventStreamWriteTimeout, v, 100*time.Millisecond, time.Hour)
		}},

	{Name: "consumer.batch_size", Default: "5000", Range: "1..100000",
		Doc: "Most events one consumer round reads; rounds repeat at once while they read full batches.",
		set: func(c *Config, v string) error { return intIn(&c.Consumer.BatchSize, v, 1, 100000) }},
	{Name: "consumer.poll_interval", Default: "1s", Range: "10ms..1h",
		Doc: "Rounds run at least this often even without a notification.",
		set: func(c *Config, v string) error {
			return dur(&c.Consumer.PollInterval, v, 10*time.Millisecond, time.Hour)
		}},
	{Name: "consumer.round_cooldown", Default: "5ms", Range: "0s..1s",
		Doc: "Least time between the starts of two rounds of a consumer in one process that a notification woke; notifications meanwhile wait for its end, so a steady trickle of events is read a few at a time, not one round per event. Rounds that read a full batch repeat at once.",
		set: func(c *Config, v string) error {
			return dur(&c.Consumer.RoundCooldown, v, 0, time.Second)
		}},
	{Name: "consumer.round_timeout", Default: "30s", Range: "100ms..10m",
		Doc: "A round that takes longer is cancelled and rolled back.",
		set: func(c *Config, v string) error {
			return dur(&c.Consumer.RoundTimeout, v, 100*time.Millisecond, 10*time.Minute)
		}},
	{Name: "consumer.round_max_jobs", Default: "1000", Range: "1..100000",
		Doc: "Most jobs one round of a consumer that can stop early (push) inserts; the rest of its events wait for the next round.",
		set: func(c *Config, v string) error { return intIn(&c.Consumer.RoundMaxJobs, v, 1, 100000) }},
	{Name: "consumer.round_max_receivers", Default: "50000", Range: "1..10000000",
		Doc: "Most receivers (a message to one device) one round of a consumer that can stop early (push) reads; the rest of its events wait for the next round.",
		set: func(c *Config, v string) error { return intIn(&c.Consumer.RoundMaxReceivers, v, 1, 10_000_000) }},
	{Name: "consumer.pending_alert_after", Default: "1h", Range: "1s..8760h, below sync.event_retention",
		Doc: "BothyEventConsumerLag fires when the oldest unprocessed event is older than this.",
		set: func(c *Config, v string) error {
			return dur(&c.Consumer.PendingAlertAfter, v, time.Second, 8760*time.Hour)
		}},

	{Name: "sync.event_retention", Default: "168h", Range: "1m..87600h",
		Doc: "Partitions of event_log older than this are detached and dropped.",
		set: func(c *Config, v string) error { return dur(&c.Sync.EventRetention, v, time.Minute, 87600*time.Hour) }},
	{Name: "sync.event_partition_interval", Default: "24h", Range: "1m..720h, below sync.event_retention",
		Doc: "Time span of one event_log partition (the unit retention drops).",
		set: func(c *Config, v string) error {
			return dur(&c.Sync.EventPartitionInterval, v, time.Minute, 720*time.Hour)
		}},
	{Name: "sync.maintenance_interval", Default: "10m", Range: "1s..24h",
		Doc: "How often the worker creates partitions ahead and applies retention.",
		set: func(c *Config, v string) error { return dur(&c.Sync.MaintenanceInterval, v, time.Second, 24*time.Hour) }},

	{Name: "river.max_workers", Default: "50", Range: "1..10000",
		Doc: "Delivery jobs one worker process runs at once, per queue.",
		set: func(c *Config, v string) error { return intIn(&c.River.MaxWorkers, v, 1, 10000) }},
	{Name: "river.fetch_cooldown", Default: "1ms", Range: "1ms..10s",
		Doc: "River's FetchCooldown for every client, including insert-only ones (it also paces insert notifications).",
		set: func(c *Config, v string) error {
			return dur(&c.River.FetchCooldown, v, time.Millisecond, 10*time.Second)
		}},
	{Name: "river.fetch_poll_interval", Default: "50ms", Range: "1ms..1m, at least river.fetch_cooldown",
		Doc: "River's FetchPollInterval: job pickup without a notification.",
		set: func(c *Config, v string) error {
			return dur(&c.River.FetchPollInterval, v, time.Millisecond, time.Minute)
		}},

	{Name: "river.rescue_stuck_jobs_after", Default: "2m", Range: "1m..24h",
		Doc: "A job still running after this (its process died) is handed to another worker; keep it above every job's timeout.",
		set: func(c *Config, v string) error {
			return dur(&c.River.RescueStuckJobsAfter, v, time.Minute, 24*time.Hour)
		}},

	{Name: "webhooks.allow_private_targets", Default: "false", Range: "true or false",
		Doc: "Allow webhook URLs on loopback and private addresses (local development and tests only).",
		set: func(c *Config, v string) error { return boolean(&c.Webhooks.AllowPrivateTargets, v) }},
	{Name: "webhooks.timeout", Default: "15s", Range: "100ms..2m",
		Doc: "Bound on one delivery attempt, connect to last byte read.",
		set: func(c *Config, v string) error {
			return dur(&c.Webhooks.Timeout, v, 100*time.Millisecond, 2*time.Minute)
		}},
	{Name: "webhooks.retry_budget", Default: "72h", Range: "1s..720h, below sync.event_retention",
		Doc: "How long a delivery is retried before its subscription is disabled as failing.",
		set: func(c *Config, v string) error { return dur(&c.Webhooks.RetryBudget, v, time.Second, 720*time.Hour) }},
	{Name: "webhooks.max_response_bytes", Default: "65536", Range: "0..10485760",
		Doc: "At most this much of a receiver's response body is read (and 1 KiB of it recorded).",
		set: func(c *Config, v string) error { return intIn(&c.Webhooks.MaxResponseBytes, v, 0, 10<<20) }},
	{Name: "webhooks.batch_size", Default: "100", Range: "1..1000",
		Doc: "Most deliveries of one subscription a sender claims, and records, in one transaction.",
		set: func(c *Config, v string) error { return intIn(&c.Webhooks.BatchSize, v, 1, 1000) }},
	{Name: "webhooks.rights_max_age", Default: "1s", Range: "10ms..1m",
		Doc: "Oldest a rights decision may be when a delivery request starts: a revoked right stops every request that starts later than this after the revocation.",
		set: func(c *Config, v string) error {
			return dur(&c.Webhooks.RightsMaxAge, v, 10*time.Millisecond, time.Minute)
		}},
	{Name: "webhooks.senders", Default: "200", Range: "1..10000",
		Doc: "Subscriptions one worker process sends for at once (River workers of the webhooks queue).",
		set: func(c *Config, v string) error { return intIn(&c.Webhooks.Senders, v, 1, 10000) }},
	{Name: "webhooks.sender_linger", Default: "2s", Range: "1ms..1m",
		Doc: "How long a sender with nothing left waits for new deliveries of its subscription before it lets it go (while the process has senders to spare).",
		set: func(c *Config, v string) error {
			return dur(&c.Webhooks.SenderLinger, v, time.Millisecond, time.Minute)
		}},
	// The webhooks store enforces these three defaults when a caller passes
	// no webhooks.Limits (TestCreate_Limits checks they are equal). Other
	// values take effect once config.Webhooks carries them and the HTTP API
	// and the CLI pass them on; until then they are validated only.
	{Name: "webhooks.max_event_types", Default: "100", Range: "1..10000",
		Doc: "Most event-type filters one webhook subscription may have; create and update refuse more with 422.",
		set: func(c *Config, v string) error { return intIn(&c.Webhooks.MaxEventTypes, v, 1, 10000) }},
	{Name: "webhooks.max_subscriptions_per_space", Default: "100", Range: "1..10000",
		Doc: "Most webhook subscriptions (any owner, any status) on one space; creating one more is refused with 422.",
		set: func(c *Config, v string) error { return intIn(&c.Webhooks.MaxSubscriptionsPerSpace, v, 1, 10000) }},
	{Name: "webhooks.max_subscriptions_per_owner", Default: "1000", Range: "1..100000",
		Doc: "Most webhook subscriptions (any space, any status) of one owner; creating one more is refused with 422.",
		set: func(c *Config, v string) error { return intIn(&c.Webhooks.MaxSubscriptionsPerOwner, v, 1, 100000) }},

	{Name: "push.vapid_public_key", Default: "", Range: "base64url P-256 public key (bothy push vapid-keys)",
		Doc: "VAPID public key; push delivery is off while it is empty.",
		set: func(c *Config, v string) error { c.Push.VAPIDPublicKey = v; return nil }},
	{Name: "push.vapid_private_key", Default: "", Range: "base64url P-256 private key", Secret: true,
		Doc: "VAPID private key.",
		set: func(c *Config, v string) error { c.Push.VAPIDPrivateKey = v; return nil }},
	{Name: "push.vapid_subject", Default: "mailto:ops@bothy.invalid", Range: "mailto: or https: URL",
		Doc: "Contact the push service may use (RFC 8292 sub claim).",
		set: func(c *Config, v string) error {
			return str(&c.Push.VAPIDSubject, v, func(s string) error {
				if !strings.HasPrefix(s, "mailto:") && !strings.HasPrefix(s, "https://") {
					return fmt.Errorf("must start with mailto: or https://")
				}
				return nil
			})
		}},
	{Name: "push.ttl", Default: "24h", Range: "0s..672h",
		Doc: "How long the push service keeps an undelivered message (TTL header).",
		set: func(c *Config, v string) error { return dur(&c.Push.TTL, v, 0, 672*time.Hour) }},
	{Name: "push.urgency", Default: "normal", Range: "very-low, low, normal or high",
		Doc: "Urgency header of push messages (RFC 8030 5.3).",
		set: func(c *Config, v string) error { return oneOf(&c.Push.Urgency, v, "very-low", "low", "normal", "high") }},
	{Name: "push.batch_size", Default: "500", Range: "1..5000",
		Doc: "Most messages (an event to a device) one push.deliver job sends; a round makes one job per push service and batch.",
		set: func(c *Config, v string) error { return intIn(&c.Push.BatchSize, v, 1, 5000) }},
	{Name: "push.rights_max_age", Default: "1s", Range: "10ms..1m",
		Doc: "Oldest a rights decision may be when a push request starts: a revoked right stops every push request that starts later than this after the revocation commits.",
		set: func(c *Config, v string) error {
			return dur(&c.Push.RightsMaxAge, v, 10*time.Millisecond, time.Minute)
		}},
	{Name: "push.origin_concurrency", Default: "16", Range: "1..256",
		Doc: "Most requests a worker process has in flight to one push service (scheme and host of the endpoints), over all its jobs.",
		set: func(c *Config, v string) error { return intIn(&c.Push.OriginConcurrency, v, 1, 256) }},
	{Name: "push.allow_private_targets", Default: "false", Range: "true or false",
		Doc: "Allow push endpoints on loopback and private addresses (load tests and local development only).",
		set: func(c *Config, v string) error { return boolean(&c.Push.AllowPrivateTargets, v) }},

	{Name: "perf.push_handoff_p95", Default: "25ms", Range: "1ms..1m",
		Doc: "Budget for the p95 from producer commit to decrypted push message (perf/push_handoff).",
		set: func(c *Config, v string) error { return dur(&c.Perf.PushHandoffP95, v, time.Millisecond, time.Minute) }},
	{Name: "perf.webhook_handoff_p95", Default: "25ms", Range: "1ms..1m",
		Doc: "Budget for the p95 from producer commit to a webhook request received with a verified signature (perf/webhook_handoff).",
		set: func(c *Config, v string) error {
			return dur(&c.Perf.WebhookHandoffP95, v, time.Millisecond, time.Minute)
		}},

	{Name: "console.enabled", Default: "false", Range: "true or false",
		Doc: "Serve the web console under /console/ on the api role (needs console.key).",
		set: func(c *Config, v string) error { return boolean(&c.Console.Enabled, v) }},
	{Name: "console.key", Default: "", Range: "empty or at least 32 characters", Secret: true,
		Doc: "Signs the console's portal links (POST /v1/portal-links); changing it invalidates every link issued.",
		set: func(c *Config, v string) error {
			return str(&c.Console.Key, v, func(s string) error {
				if s != "" && len(s) < 32 {
					return fmt.Errorf("too short: %d characters, want at least 32", len(s))
				}
				return nil
			})
		}},
	{Name: "console.frame_ancestors", Default: "'none'", Range: "a CSP source list, such as https://app.example.com",
		Doc: "Who may frame portal pages (Content-Security-Policy frame-ancestors); other console pages are never framed.",
		set: func(c *Config, v string) error {
			return str(&c.Console.FrameAncestors, v, func(s string) error {
				if s == "" || strings.ContainsAny(s, ";,\r\n") {
					return fmt.Errorf("want a space-separated CSP source list without ; or ,")
				}
				return nil
			})
		}},
	{Name: "console.session_ttl", Default: "12h", Range: "5m..720h",
		Doc: "How long a console session lasts at most; it ends earlier with its token.",
		set: func(c *Config, v string) error { return dur(&c.Console.SessionTTL, v, 5*time.Minute, 720*time.Hour) }},
	{Name: "console.secure_cookies", Default: "false", Range: "true or false",
		Doc: "Mark the console's cookies Secure on plain-HTTP requests: set it when a TLS-terminating proxy serves the console over HTTPS. Over direct TLS they are Secure anyway; X-Forwarded-Proto is not trusted.",
		set: func(c *Config, v string) error { return boolean(&c.Console.SecureCookies, v) }},

	{Name: "console.public_url", Default: "", Range: "empty or an absolute http or https URL, such as https://bothy.example.com",
		Doc: "The console's public address, when a proxy or a product serves it under a name other than the request's Host: portal links (POST /v1/portal-links) and the console's links are built from it. Empty: from the request.",
		set: func(c *Config, v string) error {
			return str(&c.Console.PublicURL, v, func(s string) error {
				if s == "" {
					return nil
				}
				u, err := url.Parse(s)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
					u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
					return fmt.Errorf("want an absolute http or https URL without user, query or fragment, such as https://bothy.example.com")
				}
				return nil
			})
		}},

	{Name: "log.level", Default: "info", Range: "debug, info, warn or error",
		Doc: "Lowest level logged.",
		set: func(c *Config, v string) error { return oneOf(&c.Log.Level, v, "debug", "info", "warn", "error") }},
	{Name: "log.format", Default: "text", Range: "text or json",
		Doc: "Log line format on stderr.",
		set: func(c *Config, v string) error { return oneOf(&c.Log.Format, v, "text", "json") }},
}

func str(dst *string, v string, check func(string) error) error {
	if err := check(v); err != nil {
		return err
	}
	*dst = v
	return nil
}

func intIn(dst *int, v string, lo, hi int) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return fmt.Errorf("%q is not an integer in %d..%d", v, lo, hi)
	}
	*dst = n
	return nil
}

func dur(dst *time.Duration, v string, lo, hi time.Duration) error {
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		return fmt.Errorf("%q is not a duration in %s..%s (such as 500ms, 30s, 2h)", v, lo, hi)
	}
	*dst = d
	return nil
}

func boolean(dst *bool, v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("%q is not true or false", v)
	}
	*dst = b
	return nil
}

func oneOf(dst *string, v string, allowed ...string) error {
	if !slices.Contains(allowed, v) {
		return fmt.Errorf("%q is not one of %s", v, strings.Join(allowed, ", "))
	}
	*dst = v
	return nil
}

func validDBURL(s string) error {
	u, err := url.Parse(s)
	// A Unix socket directory may stand in the host= parameter, as libpq
	// and pgx read it: postgres:///bothy?host=/var/run/postgresql.
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || (u.Host == "" && u.Query().Get("host") == "") {
		return fmt.Errorf("not a postgres://host/db URL (or postgres:///db?host=/socket/dir)")
	}
	return nil
}

func validAddr(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q has no valid port", s)
	}
	return nil
}
