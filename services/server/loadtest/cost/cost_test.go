package cost_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/loadtest/cost"
)

func TestDatabase_TransactionsOnceSessionsEnded(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	ctx := context.Background()
	db.Pool.Close()
	d, err := cost.OpenDatabase(ctx, dbtest.ServerURL(t), db.Name)
	require.NoError(t, err)
	defer d.Close(ctx)
	require.NoError(t, d.AwaitQuiet(ctx, time.Minute))
	x0, err := d.Transactions(ctx)
	require.NoError(t, err)

	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	for range 5 {
		_, err := conn.Exec(ctx, `SELECT 1`, pgx.QueryExecModeSimpleProtocol)
		require.NoError(t, err)
	}
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, d.AwaitQuiet(ctx, time.Minute))
	x1, err := d.Transactions(ctx)
	require.NoError(t, err)
	// Five statements, and the transaction in which the session started.
	require.Equal(t, int64(6), x1-x0)
}

func TestTreeCPU_HoldsReapedChildren(t *testing.T) {
	t.Parallel()
	before, err := cost.TreeCPU(os.Getpid())
	require.NoError(t, err)
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`)
	require.NoError(t, cmd.Run())
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	after, err := cost.TreeCPU(os.Getpid())
	require.NoError(t, err)
	// /proc counts in 10 ms ticks, utime and stime each rounded down.
	require.GreaterOrEqual(t, after-before, child-30*time.Millisecond, "the reaped child's CPU time is in the parent's")
}
