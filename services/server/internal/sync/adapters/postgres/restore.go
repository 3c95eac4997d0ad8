package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// CursorMove is what RestoreFinalize did to one consumer's cursor.
type CursorMove struct {
	Consumer string `json:"consumer"`
	// From is last_seq before, To the head it was set to.
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Skipped is how many events the consumer will never process (To−From;
	// 0 when the cursor was already at the head).
	Skipped int64 `json:"skipped"`
}

// CursorBusyError is returned by RestoreFinalize when a consumer round holds
// cursor rows; nothing was changed. It matches sync.ErrCursorLocked.
type CursorBusyError struct {
	// Consumers whose cursor rows were locked, in name order.
	Consumers []string
}

func (e *CursorBusyError) Error() string {
	return fmt.Sprintf("cursor of %s is held by a running round (stop the workers, then retry)",
		strings.Join(e.Consumers, ", "))
}

// Unwrap makes errors.Is(err, sync.ErrCursorLocked) hold.
func (e *CursorBusyError) Unwrap() error { return sync.ErrCursorLocked }

const (
	// restoreLockTimeoutSQL bounds waits for table locks (a migration
	// running at the same time); row locks never wait (NOWAIT).
	restoreLockTimeoutSQL = `SET LOCAL lock_timeout = '5s'`
	restoreNamesSQL       = `SELECT name FROM event_consumer_cursors ORDER BY name`
	restoreLockCursorSQL  = `SELECT last_seq FROM event_consumer_cursors WHERE name = $1 FOR UPDATE NOWAIT`
	// The head is the last committed seq: a producer still inside its commit
	// holds a higher one, so its event stays after every cursor.
	restoreHeadSQL       = `SELECT last_seq FROM event_seq`
	restoreMoveCursorSQL = `UPDATE event_consumer_cursors SET last_seq = $2 WHERE name = $1`
)

// sqlStateLockNotAvailable is what FOR UPDATE NOWAIT raises on a locked row.
const sqlStateLockNotAvailable = "55P03"

// RestoreFinalize sets every consumer cursor to the current head of the
// log, so that events already delivered before the backup's restore
// point are not delivered again, and returns what moved, in name order.
//
// It runs in one transaction: each cursor row is locked FOR UPDATE NOWAIT
// (each in its own savepoint, so every busy consumer is found), and if any
// round holds one it changes nothing and returns a *CursorBusyError. Running
// it again moves nothing and reports Skipped 0. It leaves last_round_at
// alone: finalizing is not a round. A cursor ahead of the head (the
// sequence was restored from an older point than the cursors) is set back
// to the head too, with Skipped 0.
func RestoreFinalize(ctx context.Context, pool *pgxpool.Pool) ([]CursorMove, error) {
	var moves []CursorMove
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		moves = nil
		if _, err := tx.Exec(ctx, restoreLockTimeoutSQL); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, restoreNamesSQL)
		if err != nil {
			return fmt.Errorf("list cursors: %w", err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("list cursors: %w", err)
		}
		var busy []string
		for _, name := range names {
			from, locked, err := lockCursorNoWait(ctx, tx, name)
			if err != nil {
				return fmt.Errorf("lock cursor %q: %w", name, err)
			}
			if locked {
				busy = append(busy, name)
				continue
			}
			moves = append(moves, CursorMove{Consumer: name, From: from})
		}
		if len(busy) > 0 {
			return &CursorBusyError{Consumers: busy}
		}
		var head int64
		if err := tx.QueryRow(ctx, restoreHeadSQL).Scan(&head); err != nil {
			return fmt.Errorf("read head: %w", err)
		}
		for i := range moves {
			m := &moves[i]
			*m = moveTo(m.Consumer, m.From, head)
			if m.From == head {
				continue
			}
			if _, err := tx.Exec(ctx, restoreMoveCursorSQL, m.Consumer, head); err != nil {
				return fmt.Errorf("move cursor %q: %w", m.Consumer, err)
			}
		}
		return nil
	})
	if err != nil {
		var busy *CursorBusyError
		if errors.As(err, &busy) {
			return nil, err
		}
		return nil, fmt.Errorf("restore finalize: %w", err)
	}
	return moves, nil
}

// moveTo is the move of a cursor at from to head.
func moveTo(consumer string, from, head int64) CursorMove {
	return CursorMove{Consumer: consumer, From: from, To: head, Skipped: max(head-from, 0)}
}

// restorePlanSQL reads every cursor and the head in one snapshot.
const restorePlanSQL = `SELECT c.name, c.last_seq, s.last_seq FROM event_consumer_cursors c CROSS JOIN event_seq s ORDER BY c.name`

// PlanRestoreFinalize returns, changing nothing, what RestoreFinalize
// would do now: every cursor, in name order, from its last_seq to the
// head. Events committed before RestoreFinalize runs move the head on, so
// it may move the cursors further than planned.
func PlanRestoreFinalize(ctx context.Context, pool *pgxpool.Pool) ([]CursorMove, error) {
	rows, err := pool.Query(ctx, restorePlanSQL)
	if err != nil {
		return nil, fmt.Errorf("plan restore finalize: %w", err)
	}
	moves, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (CursorMove, error) {
		var name string
		var from, head int64
		err := row.Scan(&name, &from, &head)
		return moveTo(name, from, head), err
	})
	if err != nil {
		return nil, fmt.Errorf("plan restore finalize: %w", err)
	}
	return moves, nil
}

// lockCursorNoWait locks one cursor row inside a savepoint; locked reports
// that a round holds it, and the transaction stays usable either way.
func lockCursorNoWait(ctx context.Context, tx pgx.Tx, name string) (lastSeq int64, locked bool, err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return 0, false, err
	}
	err = sp.QueryRow(ctx, restoreLockCursorSQL, name).Scan(&lastSeq)
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) && pgErr.SQLState() == sqlStateLockNotAvailable {
		return 0, true, sp.Rollback(ctx)
	}
	if err != nil {
		_ = sp.Rollback(ctx)
		return 0, false, err
	}
	return lastSeq, false, sp.Commit(ctx)
}
