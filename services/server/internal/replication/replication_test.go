package replication_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/replication"
)

// TestCollector runs a private cluster, first alone, then with a WAL
// receiver (pg_receivewal --synchronous, which confirms every flush as a
// standby does) named in synchronous_standby_names as pg_auto_failover
// names standbys (ANY 1: a quorum), and reads the gauge as a superuser and
// as a role that may not see the replication state.
func TestCollector(t *testing.T) {
	p := dbtest.NewPrivate(t, map[string]string{"shared_buffers": "32MB", "max_connections": "20"})
	ctx := context.Background()
	admin := p.Pool(t)
	_, err := admin.Exec(ctx, `CREATE ROLE bothy_app LOGIN`)
	require.NoError(t, err)
	app := rolePool(t, p.URL, "bothy_app")

	require.NoError(t, testutil.CollectAndCompare(replication.NewCollector(admin, nil), gauge(0)), "no standby")
	problems, err := testutil.CollectAndLint(replication.NewCollector(admin, nil))
	require.NoError(t, err)
	require.Empty(t, problems)

	startSynchronousReceiver(t, p.Port())
	_, err = admin.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (bothy_test_receiver)'`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, known, err := replication.SynchronousStandbys(ctx, admin)
		require.NoError(t, err)
		require.True(t, known)
		if n == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the receiver did not become a synchronous standby")
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
	require.NoError(t, testutil.CollectAndCompare(replication.NewCollector(admin, nil), gauge(1)), "one synchronous standby")

	require.Zero(t, testutil.CollectAndCount(replication.NewCollector(app, nil)), "a role that cannot see sync_state exports nothing, not 0")
	_, err = admin.Exec(ctx, `GRANT pg_monitor TO bothy_app`)
	require.NoError(t, err)
	require.NoError(t, testutil.CollectAndCompare(replication.NewCollector(rolePool(t, p.URL, "bothy_app"), nil), gauge(1)),
		"with pg_monitor")
}

func gauge(n int) *strings.Reader {
	return strings.NewReader(fmt.Sprintf(`# HELP bothy_database_synchronous_standbys Standbys of the database server that confirm every commit now (pg_stat_replication sync_state sync or quorum).
# TYPE bothy_database_synchronous_standbys gauge
bothy_database_synchronous_standbys %d
`, n))
}

// rolePool connects to url as user.
func rolePool(t *testing.T, url, user string) *pgxpool.Pool {
	pc, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	pc.ConnConfig.User = user
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// startSynchronousReceiver runs pg_receivewal as a synchronous WAL
// receiver named bothy_test_receiver until the test ends.
func startSynchronousReceiver(t *testing.T, port int) {
	bin := tooltest.Need(t, tooltest.PostgresServer)
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(bin, "pg_receivewal"), "-D", dir, "--synchronous", "--no-loop", "--no-password",
		"-d", fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=bothy_test_receiver", port))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Killed with the test binary too, when no cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}
