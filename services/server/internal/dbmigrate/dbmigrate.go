// Package dbmigrate brings a database to the schema this binary expects:
// River's tables through rivermigrate, then the project's numbered SQL files
// from the migrations directory, each in a transaction of its own (or, when
// marked, alone outside one), behind an advisory lock so two processes
// running "bothy migrate up" at once serialize instead of racing.
//
// Applied files are recorded in bothy_schema_migrations with the SHA-256 of
// their text. Applying is idempotent, and a database whose applied files
// differ from the binary's is refused, naming the files, so an edited
// migration is noticed instead of silently skipped.
package dbmigrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/bothy/bothy/migrations"
)

// lockKey is the pg_advisory_lock key that serializes migrations.
// ("bothymig" in ASCII.)
const lockKey int64 = 0x626f7468796d6967

// Status reports which migrations a database has.
type Status struct {
	// RiverCurrent is River's newest applied migration version; RiverLatest
	// the newest this binary knows.
	RiverCurrent, RiverLatest int
	// Applied and Pending list the binary's files the database has applied
	// and has not.
	Applied, Pending []Migration
	// Edited lists applied files whose text or name in this binary differs
	// from what the database ran.
	Edited []Edit
	// Missing lists applied migrations this binary has no file for,
	// although it has later ones.
	Missing []Record
	// Newer lists applied migrations numbered after this binary's last
	// file: a newer release applied them and this binary was rolled back.
	Newer []Record
	// OutOfOrder lists pending files numbered below an applied one.
	OutOfOrder []Migration
}

// Current reports whether nothing is pending and the history agrees with
// this binary's files.
func (s *Status) Current() bool {
	return len(s.Pending) == 0 && s.RiverCurrent >= s.RiverLatest && s.Check() == nil
}

// Result lists what Up did.
type Result struct {
	RiverApplied []int
	Applied      []Migration
	// DroppedInvalid names INVALID indexes that an earlier, failed run of a
	// CREATE INDEX CONCURRENTLY file left behind, dropped before the file
	// ran again.
	DroppedInvalid []string
}

// Up applies every pending migration, each of the project's files in its
// own transaction (a no-transaction file alone, outside one), in version
// order. A failure stops at that file: the files before it stay applied and
// recorded, and the next Up starts with it. Up refuses, before applying
// anything of its own, a database whose history Status.Check rejects.
//
// It is safe to run concurrently from several processes: the second waits
// for the first's lock and then finds nothing to do.
func Up(ctx context.Context, pool *pgxpool.Pool) (*Result, error) {
	return up(ctx, pool, migrations.FS)
}

func up(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS) (*Result, error) {
	files, err := load(fsys)
	if err != nil {
		return nil, err
	}
	// A session-level lock on a dedicated connection: River's migrations
	// and ours run in several transactions, and no-transaction files in
	// none, so no transaction can hold it.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire: %w", err)
	}
	defer conn.Release()
	if err := lock(ctx, conn); err != nil {
		return nil, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockKey) //nolint:errcheck

	// The history is checked before anything changes, River's tables
	// included: a refused database is left as it was.
	recs, err := readHistory(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	st := compare(files, recs)
	if err := st.Check(); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	res := &Result{}
	if res.RiverApplied, err = upRiver(ctx, pool); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, createHistoryTable); err != nil {
		return nil, fmt.Errorf("migrate: bookkeeping table: %w", err)
	}
	for _, m := range st.Pending {
		if err := apply(ctx, conn, m, res); err != nil {
			return res, fmt.Errorf("migrate: %w", err)
		}
		res.Applied = append(res.Applied, m)
	}
	return res, nil
}

// lockPoll is how often a migrator waiting for another one's lock asks
// again.
const lockPoll = 200 * time.Millisecond

// lock takes the migration lock on conn, asking with pg_try_advisory_lock
// until it gets it rather than waiting inside pg_advisory_lock: a session
// waiting there holds a snapshot, and CREATE INDEX CONCURRENTLY, run by the
// lock's holder, waits for every older snapshot to go, so the two would
// deadlock (TestUp_ConcurrentProcessesBuildAnIndexConcurrently).
func lock(ctx context.Context, conn *pgxpool.Conn) error {
	for {
		var got bool
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := conn.QueryRow(tctx, `SELECT pg_try_advisory_lock($1)`, lockKey).Scan(&got)
		cancel()
		if err != nil {
			return fmt.Errorf("migrate: take lock: %w", err)
		}
		if got {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("migrate: wait for another migrator's lock: %w", ctx.Err())
		case <-time.After(lockPoll):
		}
	}
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

// GetStatus reads which migrations are applied, without changing anything.
// It returns ErrDevDatabase for a database that cannot be upgraded; an
// edited history is reported in the Status (see Status.Check).
func GetStatus(ctx context.Context, pool *pgxpool.Pool) (*Status, error) {
	return getStatus(ctx, pool, migrations.FS)
}

func getStatus(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS) (*Status, error) {
	files, err := load(fsys)
	if err != nil {
		return nil, err
	}
	rm, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, fmt.Errorf("status: river migrator: %w", err)
	}
	recs, err := readHistory(ctx, pool)
	if err != nil {
		return nil, err
	}
	st := compare(files, recs)
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
	return st, nil
}

func isUndefinedTable(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "42P01"
}
