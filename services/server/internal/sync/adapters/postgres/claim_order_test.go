package postgres_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// TestEventLog_OverlappingClaimsDoNotDeadlock: two producers write the same
// two ids, listed in opposite orders, while a third session holds one of
// them. When it lets go, both race for it; a producer that claimed the ids
// in its own order could then hold one id while waiting for the other, and
// PostgreSQL would end one of them with a deadlock error. The ids are
// claimed sorted, so neither ever waits while holding what the other needs.
// Each round leaves the race to chance, so it runs several rounds.
func TestEventLog_OverlappingClaimsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `CREATE TABLE items (id bigserial PRIMARY KEY)`)
	require.NoError(t, err)
	event := func(id uuid.UUID) sync.NewEvent {
		return sync.NewEvent{ID: id, Space: "s1", Type: "item.created", Actor: "alice", Data: json.RawMessage(`{}`)}
	}

	for round := range 20 {
		x, y := uuid.New(), uuid.New()
		holder, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = holder.Exec(ctx, `INSERT INTO event_ids (id, after_seq) VALUES ($1, 0)`, y)
		require.NoError(t, err)

		errs := make(chan error, 2)
		write := func(news ...sync.NewEvent) {
			_, err := writeEvents(ctx, b.log, news...)
			errs <- err
		}
		go write(event(x), event(y))
		waitForLockWaiters(t, b, 1) // the first waits for y, perhaps holding x
		go write(event(y), event(x))
		waitForLockWaiters(t, b, 2)
		require.NoError(t, holder.Rollback(ctx))
		require.NoError(t, <-errs, "round %d", round)
		require.NoError(t, <-errs, "round %d", round)
		require.Equal(t, 1, rowsWithID(t, b, x), "round %d", round)
		require.Equal(t, 1, rowsWithID(t, b, y), "round %d", round)
	}
}
