package testsweep

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSweep_RemovesOnlyDirectoriesOfGoneOwners: of the directories in the
// temporary folder, the sweep removes those whose marker names a process
// that is gone (it exited; its id now belongs to another process; it ran
// before the last boot), killing the program that ran from one of them,
// and leaves the one of a live owner, one without a marker and one whose
// marker it cannot read. A process that only works in a swept directory
// is not one of its programs and is left alone.
func TestSweep_RemovesOnlyDirectoriesOfGoneOwners(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mk := func(name string) string {
		d := filepath.Join(root, name)
		require.NoError(t, os.Mkdir(d, 0o755))
		return d
	}
	me := self()

	exited := mk("exited")
	gone := startSleep(t, "sleep", "")
	goneOwner := owner{pid: gone.Process.Pid, start: mustStart(t, gone.Process.Pid), boot: me.boot, pidNS: me.pidNS}
	require.NoError(t, gone.Process.Kill())
	_ = gone.Wait()
	require.NoError(t, writeMarker(exited, goneOwner))
	// A program of the directory (a binary built there) and a process
	// that merely works in it.
	bin := filepath.Join(exited, "server")
	copyFile(t, lookSleep(t), bin)
	held := startSleep(t, bin, "")
	visitor := startSleep(t, "sleep", exited)

	reused := mk("reused")
	require.NoError(t, writeMarker(reused, owner{pid: me.pid, start: me.start + "0", boot: me.boot, pidNS: me.pidNS}))
	rebooted := mk("rebooted")
	require.NoError(t, writeMarker(rebooted, owner{pid: me.pid, start: me.start, boot: "another-boot", pidNS: me.pidNS}))

	live := mk("live")
	require.NoError(t, writeMarker(live, me))
	unmarked := mk("unmarked")
	garbled := mk("garbled")
	require.NoError(t, os.WriteFile(filepath.Join(garbled, MarkerName), []byte("pid=1\n"), 0o644))

	swept := sweepRoot(root)
	require.ElementsMatch(t, []string{exited, reused, rebooted}, swept)
	for _, d := range swept {
		require.NoDirExists(t, d)
	}
	for _, d := range []string{live, unmarked, garbled} {
		require.DirExists(t, d)
	}
	requireExits(t, held)
	require.NoError(t, syscall.Kill(visitor.Process.Pid, 0), "a process that only works in the directory runs on")
}

// TestMkdirTemp_MarksTheDirectoryAsThisProcesss: the marker names this
// process, alive; Disown removes it.
func TestMkdirTemp_MarksTheDirectoryAsThisProcesss(t *testing.T) {
	t.Parallel()
	dir, err := MkdirTemp("testsweep-mark-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	o, ok := readMarker(dir)
	require.True(t, ok)
	require.Equal(t, os.Getpid(), o.pid)
	require.Equal(t, ownerAlive, o.state())
	require.NoError(t, Disown(dir))
	_, ok = readMarker(dir)
	require.False(t, ok)
}

// startSleep starts sleep (the program at path) in dir, ended with the
// test.
func startSleep(t *testing.T, path, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path, "600")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

func lookSleep(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sleep")
	require.NoError(t, err)
	p, err = filepath.EvalSymlinks(p)
	require.NoError(t, err)
	return p
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o755))
}

func mustStart(t *testing.T, pid int) string {
	t.Helper()
	s, err := startTime(pid)
	require.NoError(t, err)
	return s
}

// requireExits waits for cmd, a child of this test, to end by SIGKILL.
func requireExits(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal(), "process %d", cmd.Process.Pid)
	case <-time.After(30 * time.Second):
		t.Fatalf("process %s did not end", strconv.Itoa(cmd.Process.Pid))
	}
}
