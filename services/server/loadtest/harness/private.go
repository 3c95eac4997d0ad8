package harness

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/dburl"
	"github.com/bothy/bothy/services/server/internal/pgcluster"
	"github.com/bothy/bothy/services/server/internal/testsweep"
)

// copiedSettings are the server settings that change what a load costs
// (memory, WAL, checkpoints, durability, vacuum, the planner): a private
// cluster takes them from the shared server, so its figures compare with
// runs there.
var copiedSettings = []string{
	"shared_buffers", "max_connections", "work_mem", "maintenance_work_mem", "effective_cache_size",
	"fsync", "synchronous_commit", "full_page_writes", "wal_level", "wal_buffers", "wal_compression",
	"wal_writer_delay", "commit_delay", "max_wal_size", "min_wal_size", "checkpoint_timeout",
	"checkpoint_completion_target", "autovacuum", "random_page_cost", "jit",
}

// statementsSettings load pg_stat_statements, counting the statements
// clients send (not those inside functions) and BEGIN, COMMIT and other
// utility statements.
var statementsSettings = map[string]string{
	"shared_preload_libraries":          "pg_stat_statements",
	"pg_stat_statements.track":          "top",
	"pg_stat_statements.track_utility":  "on",
	"pg_stat_statements.max":            "5000",
	"pg_stat_statements.track_planning": "off",
}

// PrivateParams says how to start a private server.
type PrivateParams struct {
	// SharedURL is the server whose settings the private one copies
	// (copiedSettings); PostgreSQL's defaults when it does not answer.
	SharedURL string
	// Defaults starts it with PostgreSQL's defaults instead of the shared
	// server's settings, as a new installation runs.
	Defaults bool
	// Settings are set on top (--pg-setting k=v).
	Settings map[string]string
	// Keep leaves the stopped cluster's directory in place.
	Keep bool
	// Stdout gets the lines that say where it runs and with what settings.
	Stdout io.Writer
}

// PrivateServer is a PostgreSQL cluster that serves one load test only,
// started from the machine's server binaries (as the postgres user when
// run as root), so the WAL it writes and the CPU time of its processes are
// the load's. It preloads pg_stat_statements when the extension is
// installed.
type PrivateServer struct {
	cluster *pgcluster.Cluster
	dir     string
	keep    bool
	// Settings are what it was started with.
	Settings map[string]string
	// Statements says whether pg_stat_statements is loaded.
	Statements bool
}

// StartPrivate initializes and starts a private server on a free port.
func StartPrivate(ctx context.Context, p *PrivateParams) (*PrivateServer, error) {
	// Not under a directory private to root: the server may run as postgres.
	// Owned (testsweep): a later run stops and removes the cluster if this
	// one is killed before Stop.
	dir, err := testsweep.MkdirTemp("bothy-perf-pg-")
	if err != nil {
		return nil, err
	}
	s := &PrivateServer{dir: dir, keep: p.Keep}
	copied, from := map[string]string{}, "PostgreSQL's defaults"
	if !p.Defaults {
		copied, from = sharedSettings(ctx, p.SharedURL)
	}
	maps.Copy(copied, p.Settings)
	s.Settings = maps.Clone(copied)
	s.Settings["log_min_messages"] = "warning"
	maps.Copy(s.Settings, statementsSettings)
	s.Statements = true
	statements := "loaded"
	if err := s.start(ctx); err != nil {
		// The extension is a separate package on some systems: go on
		// without it.
		for k := range statementsSettings {
			delete(s.Settings, k)
		}
		s.Statements, statements = false, fmt.Sprintf("not loaded (%v)", err)
		if err2 := s.start(ctx); err2 != nil {
			s.Stop()
			return nil, fmt.Errorf("private PostgreSQL: %w", err2)
		}
	}
	fmt.Fprintf(p.Stdout, "private PostgreSQL on %s, data in %s; pg_stat_statements %s\n",
		strings.TrimPrefix(s.URL(), "postgres://"), s.dir, statements)
	fmt.Fprintf(p.Stdout, "settings (%s): %s\n", from, formatSettings(copied))
	return s, nil
}

func (s *PrivateServer) start(ctx context.Context) error {
	c, err := pgcluster.New(ctx, &pgcluster.Config{Dir: s.dir, Settings: s.Settings})
	if err != nil {
		return err
	}
	s.cluster = c
	return c.Start(ctx)
}

// URL connects to its maintenance database "postgres".
func (s *PrivateServer) URL() string { return s.cluster.URL("postgres") }

// PID is its postmaster's process id.
func (s *PrivateServer) PID() (int, error) { return s.cluster.PID() }

// Stop stops it and removes its directory unless Keep.
func (s *PrivateServer) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if s.cluster != nil {
		if err := s.cluster.Stop(ctx); err != nil {
			_ = s.cluster.Crash(ctx)
		}
	}
	if s.keep {
		_ = testsweep.Disown(s.dir)
	} else {
		_ = os.RemoveAll(s.dir)
	}
}

// sharedSettings reads copiedSettings from the server at url, and says
// where they came from.
func sharedSettings(ctx context.Context, url string) (map[string]string, string) {
	out := map[string]string{}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	admin, err := dburl.WithDatabase(url, "postgres")
	if err != nil {
		return out, fmt.Sprintf("PostgreSQL's defaults: database.url: %v", err)
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return out, fmt.Sprintf("PostgreSQL's defaults: the shared server did not answer: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY ($1)`, copiedSettings)
	if err == nil {
		var name, v string
		_, err = pgx.ForEachRow(rows, []any{&name, &v}, func() error {
			out[name] = v
			return nil
		})
	}
	if err != nil {
		return map[string]string{}, fmt.Sprintf("PostgreSQL's defaults: reading the shared server's failed: %v", err)
	}
	return out, "copied from the shared server " + conn.Config().Host + ":" + fmt.Sprint(conn.Config().Port)
}

func formatSettings(m map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(m) {
		fmt.Fprintf(&b, " %s=%s", k, m[k])
	}
	return strings.TrimSpace(b.String())
}
