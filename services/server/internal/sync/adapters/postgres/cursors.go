package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// CursorStore implements sync.CursorStore on event_consumer_cursors.
type CursorStore struct{}

var _ sync.CursorStore = CursorStore{}

const lockCursorSQL = `
SELECT last_seq FROM event_consumer_cursors WHERE name = $1 FOR UPDATE SKIP LOCKED`

// Lock implements sync.CursorStore. A row that SKIP LOCKED passed over and a
// missing row look alike, so only on "no row" does it ask which it was.
func (CursorStore) Lock(ctx context.Context, tx pgx.Tx, name string) (sync.Cursor, error) {
	c := sync.Cursor{Name: name}
	err := tx.QueryRow(ctx, lockCursorSQL, name).Scan(&c.LastSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_consumer_cursors WHERE name = $1)`, name).Scan(&exists); err != nil {
			return c, err
		}
		if exists {
			return c, sync.ErrCursorLocked
		}
		return c, fmt.Errorf("%q: %w", name, sync.ErrUnknownConsumer)
	}
	return c, err
}

const advanceCursorSQL = `
UPDATE event_consumer_cursors SET last_seq = $2, last_round_at = now() WHERE name = $1`

// Advance implements sync.CursorStore.
func (CursorStore) Advance(ctx context.Context, tx pgx.Tx, name string, lastSeq int64) error {
	ct, err := tx.Exec(ctx, advanceCursorSQL, name, lastSeq)
	if err != nil {
		return err
	}
	if ct.RowsAffected() != 1 {
		return fmt.Errorf("%q: %w", name, sync.ErrUnknownConsumer)
	}
	return nil
}

// CursorNames lists the consumers the migrations allowed.
func CursorNames(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT name FROM event_consumer_cursors ORDER BY name`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

var _ sync.RoundBarrier = CursorStore{}

// WaitForRound implements sync.RoundBarrier: it locks the cursor row the way
// a round does, but waits instead of skipping.
func (CursorStore) WaitForRound(ctx context.Context, tx pgx.Tx, consumer string) (int64, error) {
	var read int64
	err := tx.QueryRow(ctx, `SELECT last_seq FROM event_consumer_cursors WHERE name = $1 FOR UPDATE`, consumer).Scan(&read)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%q: %w", consumer, sync.ErrUnknownConsumer)
	}
	if err != nil {
		return 0, fmt.Errorf("wait for the %s consumer's round: %w", consumer, err)
	}
	return read, nil
}
