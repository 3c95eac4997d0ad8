package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
)

var standbyAgainLine = regexp.MustCompile(`bothy dev: (node\d) is the synchronous standby again`)

// TestDev_HALosesThePrimaryAndGoesOn runs "bothy dev --ha" as a user would:
// a pg_auto_failover formation comes up with the demo, the SIGUSR1 that
// the printed usage names loses the primary, the lost node comes back as
// the standby, an event appended with the printed curl line afterwards is
// delivered, and Ctrl-C stops everything and removes the formation.
func TestDev_HALosesThePrimaryAndGoesOn(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a PostgreSQL formation")
	}
	tooltest.Need(t, tooltest.Autoctl)
	t.Parallel()
	// Not t.TempDir: its parents are private to root, and the formation
	// runs as the postgres user, in a folder of dir.
	dir, err := os.MkdirTemp("", "bothy-dev-ha-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	out, errOut := &syncBuffer{}, &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"dev", "--ha", "--addr=127.0.0.1:0", "--dir=" + dir}, &env{stdout: out, stderr: errOut})
	}()

	waitOutput(t, out, verifiedLine, 3, 2*time.Minute)
	require.Contains(t, out.String(), "pg_auto_failover formation")
	require.Contains(t, out.String(), "pg_autoctl show state")
	require.Contains(t, out.String(), "kill -USR1")

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGUSR1))
	waitOutput(t, out, standbyAgainLine, 1, 2*time.Minute)

	sendCurlLine(t, out.String())
	waitOutput(t, out, verifiedLine, 4, time.Minute)

	cancel()
	select {
	case c := <-code:
		require.Equal(t, 0, c, "stderr:\n%s", errOut.String())
	case <-time.After(time.Minute):
		t.Fatalf("bothy dev did not stop; output:\n%s", out.String())
	}
	require.NoDirExists(t, filepath.Join(dir, "ha"))
}
