package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// restoreRun runs bothy restore finalize with args on db and returns the
// exit code, stdout and stderr.
func restoreRun(t *testing.T, db *dbtest.DB, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"restore", "finalize", "--database.url=" + db.URL}, args...),
		&env{stdout: &out, stderr: &errOut})
	return code, out.String(), errOut.String()
}

// restoredDB is a database whose log head is at 42 and whose cursors are
// at 0, as after a restore.
func restoredDB(t *testing.T) *dbtest.DB {
	t.Helper()
	db := dbtest.NewDB(t)
	_, err := db.Pool.Exec(context.Background(), `UPDATE event_seq SET last_seq = 42`)
	require.NoError(t, err)
	return db
}

// requireAllAt requires every consumer cursor at seq (the plan's From is
// each cursor's last_seq).
func requireAllAt(t *testing.T, db *dbtest.DB, seq int64) {
	t.Helper()
	plan, err := postgres.PlanRestoreFinalize(context.Background(), db.Pool)
	require.NoError(t, err)
	require.NotEmpty(t, plan)
	for _, m := range plan {
		require.Equal(t, seq, m.From, "cursor %s", m.Consumer)
	}
}

func TestRestoreFinalizeCommand(t *testing.T) {
	t.Parallel()

	t.Run("WithoutYesPrintsThePlanAndMovesNothing", func(t *testing.T) {
		t.Parallel()
		db := restoredDB(t)
		code, out, errOut := restoreRun(t, db)
		require.Equal(t, 0, code, errOut)
		require.Regexp(t, `webhooks\s+0\s+42\s+42`, out)
		require.Contains(t, out, "dry run: nothing changed; --yes moves")
		requireAllAt(t, db, 0)

		code, out, errOut = restoreRun(t, db, "--json")
		require.Equal(t, 0, code, errOut)
		var got restoreReport
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		require.True(t, got.DryRun)
		require.Empty(t, got.Workers)
		require.NotEmpty(t, got.Cursors)
		for _, m := range got.Cursors {
			require.Equal(t, postgres.CursorMove{Consumer: m.Consumer, From: 0, To: 42, Skipped: 42}, m)
		}
		requireAllAt(t, db, 0)
	})

	t.Run("WithYesMovesEveryCursorToTheHead", func(t *testing.T) {
		t.Parallel()
		db := restoredDB(t)
		code, out, errOut := restoreRun(t, db, "--yes")
		require.Equal(t, 0, code, errOut)
		require.Regexp(t, `webhooks\s+0\s+42\s+42`, out)
		require.Contains(t, out, "cursors to the head")
		requireAllAt(t, db, 42)

		code, out, errOut = restoreRun(t, db, "--yes", "--json")
		require.Equal(t, 0, code, errOut)
		var got restoreReport
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		require.False(t, got.DryRun)
		for _, m := range got.Cursors {
			require.Equal(t, postgres.CursorMove{Consumer: m.Consumer, From: 42, To: 42}, m)
		}
	})

	t.Run("RefusesWhileAWorkerHoldsItsLivenessLock", func(t *testing.T) {
		t.Parallel()
		db := restoredDB(t)
		h, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: db.URL, ApplicationName: "bothy-worker-4242-alive",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		require.NoError(t, h.Acquire(context.Background()))
		t.Cleanup(func() { _ = h.Close(context.Background()) })
		holder := fmt.Sprintf("pid %d bothy-worker-4242-alive", h.PID())

		code, out, errOut := restoreRun(t, db)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "worker processes hold liveness locks: "+holder)
		require.Contains(t, out, "--yes refuses while they run")

		code, _, errOut = restoreRun(t, db, "--yes")
		require.Equal(t, 1, code)
		require.Contains(t, errOut, "worker processes are running on this database: "+holder)
		require.Contains(t, errOut, "--force")
		requireAllAt(t, db, 0)

		code, out, errOut = restoreRun(t, db, "--yes", "--force")
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "moved anyway (--force)")
		requireAllAt(t, db, 42)
	})
}
