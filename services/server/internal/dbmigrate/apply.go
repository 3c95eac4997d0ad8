package dbmigrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

const recordSQL = `INSERT INTO bothy_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)`

// apply runs one file and records it: in a transaction of its own, or
// alone outside one when the file is marked so.
func apply(ctx context.Context, conn *pgxpool.Conn, m Migration, res *Result) error {
	if m.NoTransaction {
		return applyAlone(ctx, conn, m, res)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("apply %s: begin: %w", m.File(), err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return fmt.Errorf("apply %s: %w", m.File(), err)
	}
	if _, err := tx.Exec(ctx, recordSQL, m.Version, m.Name, m.Checksum); err != nil {
		return fmt.Errorf("record %s: %w", m.File(), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("apply %s: commit: %w", m.File(), err)
	}
	return nil
}

// applyAlone runs a no-transaction file and then records it. The two are
// not atomic: a crash between them runs the file again next time, which is
// why such a file must be safe to run twice (IF NOT EXISTS).
func applyAlone(ctx context.Context, conn *pgxpool.Conn, m Migration, res *Result) error {
	if m.Index != "" {
		dropped, err := dropInvalidIndex(ctx, conn, m.Index)
		if err != nil {
			return fmt.Errorf("apply %s: %w", m.File(), err)
		}
		if dropped {
			res.DroppedInvalid = append(res.DroppedInvalid, m.Index)
		}
	}
	// The extended protocol's Parse takes a single statement: the server
	// refuses a file of several before running any of them, and runs the
	// one it takes outside any transaction block.
	if _, err := conn.Conn().PgConn().ExecParams(ctx, m.SQL, nil, nil, nil, nil).Close(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42601" && pgErr.Message == "cannot insert multiple commands into a prepared statement" {
			return fmt.Errorf("apply %s: a no-transaction migration holds exactly one statement: %w", m.File(), err)
		}
		return fmt.Errorf("apply %s (outside a transaction): %w", m.File(), err)
	}
	if _, err := conn.Exec(ctx, recordSQL, m.Version, m.Name, m.Checksum); err != nil {
		return fmt.Errorf("record %s: %w", m.File(), err)
	}
	return nil
}

// dropInvalidIndex drops the index named as in a migration file when it
// exists and is INVALID: the remains of a CREATE INDEX CONCURRENTLY of that
// file that failed or was interrupted. Left in place, it would be kept by
// the file's IF NOT EXISTS, never used by queries and still updated by
// every write. The caller holds the migration lock, so no build of it is
// in progress.
func dropInvalidIndex(ctx context.Context, conn *pgxpool.Conn, index string) (bool, error) {
	var invalid bool
	err := conn.QueryRow(ctx, `SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`, index).Scan(&invalid)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look for an invalid index %s: %w", index, err)
	}
	if !invalid {
		return false, nil
	}
	if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+index); err != nil {
		return false, fmt.Errorf("drop invalid index %s: %w", index, err)
	}
	return true, nil
}
