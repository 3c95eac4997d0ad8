// Package config loads bothy's configuration from its defaults, an optional
// file, the environment and command-line flags, in that order of precedence
// (a later source wins), and validates every value against its range.
//
// Every key is declared once, in the table in keys.go, with its default, its
// accepted range and its meaning; "bothy config" prints that table, and the
// README's configuration section is generated from the same words. A bad
// value is refused with the key's name and the accepted range, so a process
// never starts half-configured.
package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is the validated configuration.
type Config struct {
	Database Database
	Server   Server
	Consumer Consumer
	Sync     Sync
	River    River
	Webhooks Webhooks
	Push     Push
	Perf     Perf
	Log      Log
	Console  Console
	values   map[string]string
	sourceOf map[string]string
}

// Database configures the PostgreSQL connection.
type Database struct {
	URL      string
	MaxConns int
	// StartWait bounds how long a starting server waits for an unreachable
	// database; 0 is no bound.
	StartWait time.Duration
	// ExpectSynchronousStandby says that the database should always have a
	// synchronous standby in sync; the alert compares with it.
	ExpectSynchronousStandby bool
}

// Server configures "bothy server".
type Server struct {
	Role            string
	ListenAddr      string
	ShutdownTimeout time.Duration
	Migrate         bool
	AdminToken      string
	AuthCacheTTL    time.Duration
	// MaxEventWaitersPerToken and MaxEventWaiters bound the open long
	// polls and event streams of a token and of the process.
	MaxEventWaitersPerToken int
	MaxEventWaiters         int
	// EventStreamWriteTimeout closes an event stream whose writes stall.
	EventStreamWriteTimeout time.Duration
}

// Consumer configures consumer rounds.
type Consumer struct {
	BatchSize         int
	PollInterval      time.Duration
	RoundCooldown     time.Duration
	RoundTimeout      time.Duration
	RoundMaxJobs      int
	RoundMaxReceivers int
	PendingAlertAfter time.Duration
}

// Sync configures the event log.
type Sync struct {
	EventRetention         time.Duration
	EventPartitionInterval time.Duration
	MaintenanceInterval    time.Duration
}

// River configures the job queue clients.
type River struct {
	MaxWorkers        int
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	// RescueStuckJobsAfter is River's RescueStuckJobsAfter.
	RescueStuckJobsAfter time.Duration
}

// Webhooks configures outgoing webhooks.
type Webhooks struct {
	AllowPrivateTargets      bool
	Timeout                  time.Duration
	RetryBudget              time.Duration
	MaxResponseBytes         int
	MaxEventTypes            int
	MaxSubscriptionsPerSpace int
	MaxSubscriptionsPerOwner int
	BatchSize                int
	RightsMaxAge             time.Duration
	Senders                  int
	SenderLinger             time.Duration
}

// Push configures Web Push.
type Push struct {
	VAPIDPublicKey      string
	VAPIDPrivateKey     string
	VAPIDSubject        string
	TTL                 time.Duration
	Urgency             string
	AllowPrivateTargets bool
	BatchSize           int
	OriginConcurrency   int
	RightsMaxAge        time.Duration
}

// Console configures the web console on the api role.
type Console struct {
	Enabled        bool
	Key            string
	FrameAncestors string
	SessionTTL     time.Duration
	SecureCookies  bool
	// PublicURL is the console's public address (console.public_url);
	// empty: the request's.
	PublicURL string
}

// Perf holds the performance budgets load tests check.
type Perf struct {
	PushHandoffP95    time.Duration
	WebhookHandoffP95 time.Duration
}

// Log configures logging.
type Log struct {
	Level  string
	Format string
}

// Source says where a value came from.
const (
	SourceDefault = "default"
	SourceFile    = "file"
	SourceEnv     = "env"
	SourceFlag    = "flag"
)

// The environment variables of the bothy CLI itself: they say where the
// configuration is and which server a command runs through, and are no
// configuration keys, so Load passes over them.
const (
	EnvConfig      = "BOTHY_CONFIG"      // the configuration file
	EnvServer      = "BOTHY_SERVER"      // the server commands run through
	EnvToken       = "BOTHY_TOKEN"       // the bearer token for that server
	EnvCredentials = "BOTHY_CREDENTIALS" // the file "bothy login" saves tokens in
)

// CLIEnv lists the CLI's own environment variables.
var CLIEnv = []string{EnvConfig, EnvServer, EnvToken, EnvCredentials}

// EnvName is the environment variable of a key: BOTHY_ plus the key in
// upper case with dots as underscores (consumer.batch_size →
// BOTHY_CONSUMER_BATCH_SIZE).
func EnvName(key string) string {
	return "BOTHY_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Load builds the configuration: defaults, then the file (if path is not
// empty), then environment variables from environ, then flags (key=value
// pairs, already split). Unknown keys in any source are an error, so a typo
// never silently falls back to a default; the CLI's own variables (CLIEnv)
// and BOTHY_TEST_* are not keys and are passed over.
func Load(path string, environ []string, flags map[string]string) (*Config, error) {
	vals := map[string]string{}
	src := map[string]string{}
	for _, k := range Keys {
		vals[k.Name], src[k.Name] = k.Default, SourceDefault
	}
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("config file: %w", err)
		}
		fileVals, err := parseFile(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
		for k, v := range fileVals {
			vals[k], src[k] = v, SourceFile
		}
	}
	envIndex := map[string]string{}
	for _, k := range Keys {
		envIndex[EnvName(k.Name)] = k.Name
	}
	for _, kv := range environ {
		name, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "BOTHY_") || slices.Contains(CLIEnv, name) || strings.HasPrefix(name, "BOTHY_TEST_") {
			continue
		}
		key, known := envIndex[name]
		if !known {
			return nil, fmt.Errorf("environment variable %s: no such configuration key (see \"bothy config\")", name)
		}
		vals[key], src[key] = v, SourceEnv
	}
	for k, v := range flags {
		if _, ok := lookup(k); !ok {
			return nil, fmt.Errorf("flag --%s: no such configuration key (see \"bothy config\")", k)
		}
		vals[k], src[k] = v, SourceFlag
	}
	cfg := &Config{values: vals, sourceOf: src}
	var errs []error
	for _, k := range Keys {
		if err := k.set(cfg, strings.TrimSpace(vals[k.Name])); err != nil {
			errs = append(errs, fmt.Errorf("%s (from %s): %w", k.Name, src[k.Name], err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// check holds the rules that relate several keys.
func (c *Config) check() error {
	// The lag alarm must fire while the events are still there.
	if c.Consumer.PendingAlertAfter >= c.Sync.EventRetention {
		return fmt.Errorf("consumer.pending_alert_after (%s) must be strictly below sync.event_retention (%s): "+
			"the lag alarm has to fire before retention removes unprocessed events",
			c.Consumer.PendingAlertAfter, c.Sync.EventRetention)
	}
	if c.Sync.EventPartitionInterval >= c.Sync.EventRetention {
		return fmt.Errorf("sync.event_partition_interval (%s) must be below sync.event_retention (%s): retention drops whole partitions",
			c.Sync.EventPartitionInterval, c.Sync.EventRetention)
	}
	if c.Webhooks.RetryBudget >= c.Sync.EventRetention {
		return fmt.Errorf("webhooks.retry_budget (%s) must be below sync.event_retention (%s): "+
			"a failing receiver's deliveries must end dead or disabled while their events are still there",
			c.Webhooks.RetryBudget, c.Sync.EventRetention)
	}
	if c.Console.Enabled && len(c.Console.Key) < 32 {
		return fmt.Errorf("console.key must be set, at least 32 characters, while console.enabled is true: it signs portal links")
	}
	if c.Server.MaxEventWaitersPerToken > c.Server.MaxEventWaiters {
		return fmt.Errorf("server.max_event_waiters_per_token (%d) must be at most server.max_event_waiters (%d)",
			c.Server.MaxEventWaitersPerToken, c.Server.MaxEventWaiters)
	}
	if c.River.FetchPollInterval < c.River.FetchCooldown {
		return fmt.Errorf("river.fetch_poll_interval (%s) must be at least river.fetch_cooldown (%s), as River requires",
			c.River.FetchPollInterval, c.River.FetchCooldown)
	}
	return nil
}

// Value returns a key's raw value and its source, for "bothy config".
func (c *Config) Value(key string) (value, source string) {
	return c.values[key], c.sourceOf[key]
}

func parseFile(r io.Reader) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: want key = value", line)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if _, known := lookup(k); !known {
			return nil, fmt.Errorf("line %d: no such configuration key %q (see \"bothy config\")", line, k)
		}
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		}
		out[k] = v
	}
	return out, sc.Err()
}

func lookup(name string) (Key, bool) {
	i := slices.IndexFunc(Keys, func(k Key) bool { return k.Name == name })
	if i < 0 {
		return Key{}, false
	}
	return Keys[i], true
}

// Describe writes every key with its default, range, environment variable
// and meaning: the one place that documents them all ("bothy config keys").
func Describe(w io.Writer) {
	fmt.Fprintln(w, "Precedence: defaults < config file (--config or BOTHY_CONFIG; lines of key = value) < environment (BOTHY_<KEY>) < flags (--key=value).")
	fmt.Fprintln(w)
	for _, k := range Keys {
		def := k.Default
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "%s\n    default %s; accepts %s; env %s\n    %s\n", k.Name, def, k.Range, EnvName(k.Name), k.Doc)
	}
}

// Print writes the effective configuration with each value's source;
// secret values are replaced by a mark.
func (c *Config) Print(w io.Writer) {
	for _, k := range Keys {
		v, src := c.Value(k.Name)
		if k.Secret && v != "" {
			v = "(set, hidden)"
		}
		if k.Name == "database.url" {
			v = redactURL(v)
		}
		fmt.Fprintf(w, "%-32s %-40s (%s)\n", k.Name, v, src)
	}
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
