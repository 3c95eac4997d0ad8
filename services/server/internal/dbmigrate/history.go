package dbmigrate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrEdited is returned, wrapped with the files it concerns, when the
// database's history differs from this binary's files: an applied file's
// text or name changed, or an applied file is gone. A landed migration is
// never edited; the change belongs in a new file.
var ErrEdited = errors.New("applied migration differs from this binary's file")

// ErrOutOfOrder is returned, wrapped with the files it concerns, when a
// pending file is numbered below one the database has already applied:
// applying it now would run it against a schema its author never saw.
var ErrOutOfOrder = errors.New("pending migration numbered below an applied one")

// ErrDevDatabase is returned for a database migrated by a development build
// from before the first release: its bookkeeping has no checksums, and its
// versions may mean other files (those the baseline migration replaced). It
// cannot be upgraded; it is recreated.
var ErrDevDatabase = errors.New("database made by a development build of bothy before its first release")

// Record is an applied migration as the database recorded it.
type Record struct {
	Version  int
	Name     string
	Checksum string
}

// File is the recorded migration's file name.
func (r Record) File() string { return fileOf(r.Version, r.Name) }

// Edit is an applied migration whose file in this binary differs from
// what the database ran.
type Edit struct {
	Applied Record
	File    Migration
}

// HistoryVersion numbers the shape of the bookkeeping table. It changes
// with createHistoryTable, so that a test template migrated by an earlier
// runner is not taken for a current one.
const HistoryVersion = 2

const createHistoryTable = `
CREATE TABLE IF NOT EXISTS bothy_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL CHECK (checksum ~ '^[0-9a-f]{64}$'),
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// querier is what reading the history needs: a connection, a pool or a
// transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readHistory returns the applied migrations in version order: none when
// the bookkeeping table does not exist, ErrDevDatabase when it has no
// checksums.
func readHistory(ctx context.Context, q querier) ([]Record, error) {
	var table, withChecksum bool
	var db string
	err := q.QueryRow(ctx, `
		SELECT to_regclass('bothy_schema_migrations') IS NOT NULL,
		       EXISTS (SELECT 1 FROM pg_attribute
		               WHERE attrelid = to_regclass('bothy_schema_migrations') AND attname = 'checksum' AND NOT attisdropped),
		       current_database()`).Scan(&table, &withChecksum, &db)
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	if !table {
		return nil, nil
	}
	if !withChecksum {
		return nil, fmt.Errorf("%w: database %q cannot be upgraded (bothy_schema_migrations records no checksums); "+
			"the product was unreleased then, so recreate it: drop it (dropdb %s) and run bothy migrate up", ErrDevDatabase, db, db)
	}
	rows, err := q.Query(ctx, `SELECT version, name, checksum FROM bothy_schema_migrations ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	recs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Record])
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	return recs, nil
}

// compare sorts the binary's files and the database's records into a
// Status (without River's versions).
func compare(files []Migration, recs []Record) *Status {
	st := &Status{}
	byVersion := make(map[int]Record, len(recs))
	newestApplied := 0
	for _, r := range recs {
		byVersion[r.Version] = r
		newestApplied = max(newestApplied, r.Version)
	}
	newestFile := 0
	for _, m := range files {
		newestFile = max(newestFile, m.Version)
		r, ok := byVersion[m.Version]
		delete(byVersion, m.Version)
		switch {
		case !ok && m.Version < newestApplied:
			st.OutOfOrder = append(st.OutOfOrder, m)
			st.Pending = append(st.Pending, m)
		case !ok:
			st.Pending = append(st.Pending, m)
		case r.Name != m.Name || r.Checksum != m.Checksum:
			st.Edited = append(st.Edited, Edit{Applied: r, File: m})
			st.Applied = append(st.Applied, m)
		default:
			st.Applied = append(st.Applied, m)
		}
	}
	for _, r := range recs {
		if _, left := byVersion[r.Version]; !left {
			continue
		}
		if r.Version > newestFile {
			st.Newer = append(st.Newer, r)
		} else {
			st.Missing = append(st.Missing, r)
		}
	}
	return st
}

// Check returns ErrEdited or ErrOutOfOrder naming every file concerned,
// or nil when the database's history agrees with this binary's files.
// Migrations newer than the binary are no error: that is a binary rolled
// back after an upgrade, which must run on the expanded schema.
func (s *Status) Check() error {
	var edited []string
	for _, e := range s.Edited {
		if e.Applied.Name != e.File.Name {
			edited = append(edited, fmt.Sprintf("%s was applied as %s", e.File.File(), e.Applied.File()))
			continue
		}
		edited = append(edited, fmt.Sprintf("%s was changed after it was applied (applied sha256 %.12s…, file %.12s…)",
			e.File.File(), e.Applied.Checksum, e.File.Checksum))
	}
	for _, r := range s.Missing {
		edited = append(edited, fmt.Sprintf("%s was applied but this binary has no such file", r.File()))
	}
	if len(edited) > 0 {
		return fmt.Errorf("%w: %s; restore the file as it was applied and put the change in a new migration",
			ErrEdited, strings.Join(edited, "; "))
	}
	if len(s.OutOfOrder) > 0 {
		var names []string
		for _, m := range s.OutOfOrder {
			names = append(names, m.File())
		}
		return fmt.Errorf("%w: %s; renumber it after the newest applied migration", ErrOutOfOrder, strings.Join(names, ", "))
	}
	return nil
}
