// Package harness holds what the load tests under services/server/loadtest
// share: a migrated scratch database, the worker role run in process, an
// open-loop producer schedule, quantiles and a latency histogram. Each load
// test keeps its own flags, receivers and verdicts.
package harness

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dburl"
)

// ScratchParams says how to open a scratch database.
type ScratchParams struct {
	// Tool names the load test in messages, e.g. "push_handoff".
	Tool string
	// ConfigFile and Environ are the caller's configuration (--config and
	// the environment); its database.url names the server to use.
	ConfigFile string
	Environ    []string
	// ServerURL, if set, names the server to create the scratch database
	// on instead of database.url's (a private cluster, PrivateServer.URL).
	ServerURL string
	// Keys are the load test's own configuration keys, set on top of the
	// caller's and of the worker's (server.role worker, server.listen_addr
	// on a free loopback port, log.level warn, webhooks and push allowed to
	// reach the receivers on loopback); database.url is always the scratch
	// database.
	Keys map[string]string
	// MaxConns bounds the pool the load test itself uses (producers,
	// seeding, reading results).
	MaxConns int
	// Keep leaves the database in place at Close, for inspection.
	Keep bool
	// Logger receives the migration's and the worker's logs. Default:
	// warnings and errors as text on stderr.
	Logger *slog.Logger
	// Stdout gets the line naming the scratch database.
	Stdout io.Writer
}

// Scratch is a migrated database of its own on the caller's server, with
// a pool on it.
type Scratch struct {
	URL  string
	Pool *pgxpool.Pool
	// Cfg is the worker's configuration (Config(nil)).
	Cfg    *config.Config
	Logger *slog.Logger
	p      ScratchParams
}

// OpenScratch creates and migrates a scratch database (prefix bothy_perf)
// and opens a pool on it. Close drops it, also when OpenScratch fails
// after creating it.
func OpenScratch(ctx context.Context, p *ScratchParams) (*Scratch, error) {
	base, err := config.Load(p.ConfigFile, p.Environ, nil)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	s := &Scratch{p: *p, Logger: p.Logger}
	if s.Logger == nil {
		s.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	server := base.Database.URL
	if p.ServerURL != "" {
		server = p.ServerURL
	}
	if s.URL, err = dburl.NewURL(server, "bothy_perf"); err != nil {
		return nil, fmt.Errorf("database.url: %w", err)
	}
	if s.Cfg, err = s.Config(nil); err != nil {
		return nil, err
	}
	fmt.Fprintf(p.Stdout, "%s: scratch database %s\n", p.Tool, dburl.Name(s.URL))
	if err := app.Migrate(ctx, s.Cfg, s.Logger); err != nil {
		s.Close(ctx)
		return nil, fmt.Errorf("migrate scratch database: %w", err)
	}
	if err := s.Connect(ctx); err != nil {
		s.Close(ctx)
		return nil, err
	}
	return s, nil
}

// Connect opens Pool (MaxConns connections at most) unless it is open.
func (s *Scratch) Connect(ctx context.Context) error {
	if s.Pool != nil {
		return nil
	}
	pc, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		return err
	}
	pc.MaxConns = int32(max(s.p.MaxConns, 4))
	s.Pool, err = pgxpool.NewWithConfig(ctx, pc)
	return err
}

// Disconnect closes Pool until the next Connect, so that the load test has
// no session on the database while it measures what others do there.
func (s *Scratch) Disconnect() {
	if s.Pool != nil {
		s.Pool.Close()
		s.Pool = nil
	}
}

// Config is the worker's configuration: the caller's, then the load
// test's Keys, then extra, with database.url the scratch database.
func (s *Scratch) Config(extra map[string]string) (*config.Config, error) {
	flags := map[string]string{
		"server.role": "worker", "server.listen_addr": "127.0.0.1:0", "log.level": "warn",
		"webhooks.allow_private_targets": "true", "push.allow_private_targets": "true",
	}
	maps.Copy(flags, s.p.Keys)
	maps.Copy(flags, extra)
	flags["database.url"] = s.URL
	cfg, err := config.Load(s.p.ConfigFile, s.p.Environ, flags)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	return cfg, nil
}

// Close closes the pool and drops the database unless Keep was set.
func (s *Scratch) Close(ctx context.Context) {
	s.Disconnect()
	if s.p.Keep {
		return
	}
	if err := dburl.Drop(context.WithoutCancel(ctx), s.URL); err != nil {
		fmt.Fprintf(os.Stderr, "%s: could not drop the scratch database: %v\n", s.p.Tool, err)
	}
}
