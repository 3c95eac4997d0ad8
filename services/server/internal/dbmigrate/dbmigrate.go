// Package dbmigrate brings a database to the schema this binary expects:
// River's tables through rivermigrate, then the project's numbered SQL files
// from the migrations directory (those in one transaction), behind an
// advisory lock so two processes running "bothy migrate up" at once serialize instead
// of racing. Applying is idempotent: applied versions are recorded in
// bothy_schema_migrations and skipped.
package dbmigrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/bothy/bothy/migrations"
)

// lockKey is the pg_advisory_xact_lock key that serializes migrations.
// ("bothymig" in ASCII.)
const lockKey int64 = 0x626f7468796d6967

// Migration is one of the project's SQL files.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Status reports which migrations a database has.
type Status struct {
	// RiverCurrent is River's newest applied migration version; RiverLatest
	// the newest this binary knows.
	RiverCurrent, RiverLatest int
	// Applied and Pending list the project's own migrations.
	Applied, Pending []Migration
}

// Current reports whether nothing is pending.
func (s *Status) Current() bool {
	return len(s.Pending) == 0 && s.RiverCurrent >= s.RiverLatest
}

// Result lists what Up applied.
type Result struct {
	RiverApplied []int
	Applied      []Migration
}

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// Load reads the embedded migrations in version order. It fails on a file
// whose name does not follow NNNN_name.sql or on a duplicate version, so a
// mistake is caught by every test run rather than in production.
func Load() ([]Migration, error) {
	return load(migrations.FS)
}

func load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() || e.Name() == "embed.go" {
			continue
		}
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q: name must be NNNN_name.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		if prev, ok := seen[v]; ok {
			return nil, fmt.Errorf("migration version %d used by %q and %q", v, prev, e.Name())
		}
		seen[v] = e.Name()
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: m[2], SQL: string(body)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return cmp.Compare(a.Version, b.Version) })
	return out, nil
}

const createVersionTable = `
CREATE TABLE IF NOT EXISTS bothy_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// Up applies every pending migration. It is safe to run concurrently from
// several processes: the second waits for the first's lock and then finds
// nothing to do.
func Up(ctx context.Context, pool *pgxpool.Pool) (*Result, error) {
	all, err := Load()
	if err != nil {
		return nil, err
	}
	// A session-level lock on a dedicated connection: River's migrations
	// must run in transactions of their own (one adds an enum value that a
	// later one uses), so one transaction cannot hold everything.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
		return nil, fmt.Errorf("migrate: take lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockKey) //nolint:errcheck

	res := &Result{}
	if res.RiverApplied, err = upRiver(ctx, pool); err != nil {
		return nil, err
	}
	if res.Applied, err = upOwn(ctx, conn, all); err != nil {
		return nil, err
	}
	return res, nil
}

// upRiver applies River's pending migrations and returns their versions.
func upRiver(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	rm, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: river migrator: %w", err)
	}
	rr, err := rm.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: river: %w", err)
	}
	var applied []int
	for _, v := range rr.Versions {
		applied = append(applied, v.Version)
	}
	return applied, nil
}

// upOwn applies the project's migrations of all not yet recorded, in one
// transaction on conn (all or none), and returns them.
func upOwn(ctx context.Context, conn *pgxpool.Conn, all []Migration) ([]Migration, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	if _, err := tx.Exec(ctx, createVersionTable); err != nil {
		return nil, fmt.Errorf("migrate: version table: %w", err)
	}
	applied, err := appliedVersions(ctx, tx)
	if err != nil {
		return nil, err
	}
	if err := checkNames(all, applied); err != nil {
		return nil, err
	}
	var done []Migration
	for _, m := range all {
		if _, ok := applied[m.Version]; ok {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("migrate: apply %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO bothy_schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("migrate: record %04d_%s: %w", m.Version, m.Name, err)
		}
		done = append(done, m)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("migrate: commit: %w", err)
	}
	return done, nil
}

// GetStatus reads which migrations are applied, without changing anything.
func GetStatus(ctx context.Context, pool *pgxpool.Pool) (*Status, error) {
	all, err := Load()
	if err != nil {
		return nil, err
	}
	rm, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, fmt.Errorf("status: river migrator: %w", err)
	}
	st := &Status{}
	if av := rm.AllVersions(); len(av) > 0 {
		st.RiverLatest = av[len(av)-1].Version
	}
	existing, err := rm.ExistingVersions(ctx)
	if err != nil && !isUndefinedTable(err) {
		return nil, fmt.Errorf("status: river versions: %w", err)
	}
	if len(existing) > 0 {
		st.RiverCurrent = existing[len(existing)-1].Version
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("status: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('bothy_schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	applied := map[int]string{}
	if exists {
		if applied, err = appliedVersions(ctx, tx); err != nil {
			return nil, err
		}
	}
	if err := checkNames(all, applied); err != nil {
		return nil, err
	}
	for _, m := range all {
		if _, ok := applied[m.Version]; ok {
			st.Applied = append(st.Applied, m)
		} else {
			st.Pending = append(st.Pending, m)
		}
	}
	return st, nil
}

// appliedVersions maps each applied version to its recorded name.
func appliedVersions(ctx context.Context, tx pgx.Tx) (map[int]string, error) {
	rows, err := tx.Query(ctx, `SELECT version, name FROM bothy_schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	out := map[int]string{}
	var v int
	var name string
	_, err = pgx.ForEachRow(rows, []any{&v, &name}, func() error { out[v] = name; return nil })
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	return out, nil
}

// checkNames refuses a database whose applied migration carries another
// name than the binary's file of the same version: its schema came from a
// different history (a development database from before the baseline
// migration), and skipping the binary's file by number would be wrong.
func checkNames(all []Migration, applied map[int]string) error {
	for _, m := range all {
		if name, ok := applied[m.Version]; ok && name != m.Name {
			return fmt.Errorf("migration %04d_%s: the database recorded %04d_%s under this version; "+
				"it was made by a development build from before the baseline migration: recreate it (drop the database, then bothy migrate up)",
				m.Version, m.Name, m.Version, name)
		}
	}
	return nil
}

func isUndefinedTable(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "42P01"
}
