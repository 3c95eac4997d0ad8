package testsweep

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/internal/pgcluster"
)

// childEnv makes the test binary the run that is killed: it starts a
// private cluster in an owned directory, prints the directory and the
// postmaster's process id, and waits to be killed.
const childEnv = "BOTHY_TESTSWEEP_CLUSTER_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(clusterChild())
	}
	os.Exit(m.Run())
}

func clusterChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "cluster child:", err)
		return 1
	}
	dir, err := MkdirTemp("testsweep-pg-")
	if err != nil {
		return fail(err)
	}
	c, err := pgcluster.New(ctx, &pgcluster.Config{Dir: dir})
	if err != nil {
		return fail(err)
	}
	if err := c.Start(ctx); err != nil {
		return fail(err)
	}
	pid, err := c.PID()
	if err != nil {
		return fail(err)
	}
	fmt.Printf("%s %d\n", dir, pid)
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed
	return 0
}

// TestSweep_StopsTheClusterOfAKilledRun: a run that started a private
// cluster and was killed (SIGKILL, as go test -timeout leaves no cleanup
// either) leaves its postmaster running, since pg_ctl daemonizes it; the
// next sweep stops it and removes the directory.
func TestSweep_StopsTheClusterOfAKilledRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	tooltest.Need(t, tooltest.PostgresServer)
	t.Parallel()
	// The child's temporary folder: reachable for the postgres user, which
	// runs the cluster when the test runs as root.
	root, err := os.MkdirTemp("", "testsweep-root-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(root, 0o755))
	t.Cleanup(func() {
		sweepRoot(root)
		_ = os.RemoveAll(root)
	})

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=1", "TMPDIR="+root)
	child.Stderr = os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(l)
	}()
	var dir string
	var pm int
	select {
	case l := <-line:
		f := strings.Fields(l)
		require.Len(t, f, 2, "child said %q", l)
		dir = f[0]
		pm, err = strconv.Atoi(f[1])
		require.NoError(t, err)
	case <-time.After(3 * time.Minute):
		_ = child.Process.Kill()
		t.Fatal("the child did not start its cluster")
	}

	require.NoError(t, child.Process.Kill())
	_ = child.Wait()
	require.Equal(t, filepath.Dir(dir), root)
	postmaster, ok := readProcess(pm)
	require.True(t, ok, "the killed run's postmaster runs on")
	require.True(t, postmaster.heldBy(dir), "postmaster %+v", postmaster)

	require.Equal(t, []string{dir}, sweepRoot(root))
	require.NoDirExists(t, dir)
	deadline := time.Now().Add(30 * time.Second)
	for postmaster.alive() {
		require.True(t, time.Now().Before(deadline), "postmaster %d still runs after the sweep", pm)
		time.Sleep(50 * time.Millisecond) // polling the process, with a deadline
	}
}
