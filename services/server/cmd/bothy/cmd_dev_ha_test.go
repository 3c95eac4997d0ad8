package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/internal/testsweep"
)

var (
	standbyAgainLine = regexp.MustCompile(`bothy dev: (node\d) is the synchronous standby again`)
	databaseBackLine = regexp.MustCompile(`bothy dev: database back after \S+`)
)

// TestDev_HALosesThePrimaryAndGoesOn runs "bothy dev --ha" as a user would,
// as root in a fresh directory: a pg_auto_failover formation comes up with
// the demo, the SIGUSR1 that the printed usage names loses the primary (the
// roles' errors meanwhile become one line when the database is lost and
// one when it is back), the lost node comes back as the standby, an event
// appended with the printed curl line afterwards is delivered, and Ctrl-C
// stops everything and removes the formation.
func TestDev_HALosesThePrimaryAndGoesOn(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a PostgreSQL formation")
	}
	tooltest.Need(t, tooltest.Autoctl)
	t.Parallel()
	// Not t.TempDir: its parents are private to root, and the formation
	// runs as the postgres user, in a folder of dir. bothy dev creates
	// dir itself, as on a first run in a project directory. Owned
	// (testsweep): a later run stops and removes the formation if this one
	// is killed before its cleanup.
	base, err := testsweep.MkdirTemp("bothy-dev-ha-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(base, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	dir := filepath.Join(base, ".bothy-dev")
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
	// The roles' errors while the primary was away are one line each way.
	waitOutput(t, out, databaseBackLine, 1, time.Minute)
	require.Equal(t, 1, strings.Count(out.String(), "bothy dev: database unavailable: "), out.String())
	require.NotContains(t, errOut.String(), "failed to connect")

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

// TestDev_HADirectoryAsRoot: as root, PostgreSQL runs as the postgres user,
// which must pass through bothy dev's directory. A directory an earlier run
// left private to root, holding only what bothy dev puts there, is opened
// to others' search; any other private directory is left as it is, and
// bothy dev --ha refuses it saying what to do.
func TestDev_HADirectoryAsRoot(t *testing.T) {
	tooltest.Need(t, tooltest.Root)
	t.Parallel()
	base, err := os.MkdirTemp("", "bothy-dev-dir-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	mode := func(d string) os.FileMode {
		st, err := os.Stat(d)
		require.NoError(t, err)
		return st.Mode().Perm()
	}

	own := filepath.Join(base, "own")
	require.NoError(t, os.MkdirAll(filepath.Join(own, "ha", "xdg"), 0o700))
	require.NoError(t, os.Chmod(own, 0o700))
	var out bytes.Buffer
	require.NoError(t, openDevDir(own, &out))
	require.Equal(t, os.FileMode(0o711), mode(own))
	require.Contains(t, out.String(), own+": mode 0711")

	foreign := filepath.Join(base, "foreign")
	require.NoError(t, os.Mkdir(foreign, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(foreign, "notes.txt"), nil, 0o600))
	out.Reset()
	require.NoError(t, openDevDir(foreign, &out))
	require.Equal(t, os.FileMode(0o700), mode(foreign))
	require.Empty(t, out.String())

	tooltest.Need(t, tooltest.Autoctl)
	code, _, stderr := runCLI(t, nil, "dev", "--ha", "--addr=127.0.0.1:0", "--dir="+filepath.Join(foreign, ".bothy-dev"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "chmod o+x "+foreign+") or choose a directory elsewhere (--dir DIR)")
}
