package pgformation

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// start runs pg_autoctl with args as the node's keeper, in its own process
// group (PostgreSQL, which the keeper starts, joins it), its output
// appended to the node's log. The keeper outlives any context: Kill and
// stop end it.
func (n *Node) start(args ...string) error {
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.f.cfg.Autoctl, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = n.f.cfg.Dir, n.f.env, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: n.f.cred}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start pg_autoctl for %s: %w", n.name, err)
	}
	done := make(chan struct{})
	n.keeper, n.done = cmd, done
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	return nil
}

// Kill loses the node as when its machine dies: the keeper and every
// PostgreSQL process of the node get SIGKILL at once, so nothing is shut
// down, flushed or handed over, and the monitor learns of it only by its
// failed health checks. It returns once the processes are gone.
func (n *Node) Kill(ctx context.Context) error {
	if !n.Running() {
		return fmt.Errorf("%s: its keeper is not running", n.name)
	}
	return n.killGroup(ctx)
}

// killGroup SIGKILLs the keeper's process group, which PostgreSQL joined,
// and the postmaster itself (in case a keeper ever moves it out), and
// waits until both are gone.
func (n *Node) killGroup(ctx context.Context) error {
	pm := n.postmasterPID()
	_ = syscall.Kill(-n.keeper.Process.Pid, syscall.SIGKILL)
	if pm > 0 {
		_ = syscall.Kill(pm, syscall.SIGKILL)
	}
	select {
	case <-n.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if pm <= 0 {
		return nil
	}
	return poll(ctx, 30*time.Second, func(context.Context) error {
		if syscall.Kill(pm, 0) == nil {
			return fmt.Errorf("%s: postmaster %d still there", n.name, pm)
		}
		return nil
	})
}

// Rejoin starts the keeper of a lost node again, as when its machine comes
// back: it asks the monitor, finds the node demoted, rewinds it
// (pg_rewind) and follows the current primary. It returns at once; Wait
// returns when the node is a standby again.
func (n *Node) Rejoin() error {
	if n.Running() {
		return fmt.Errorf("%s: its keeper is running", n.name)
	}
	return n.start("run", "--pgdata", n.data)
}

// stop ends the keeper (SIGINT: a fast shutdown of PostgreSQL), killing
// its processes if that takes longer than 30 s, and then frees the shared
// memory a killed PostgreSQL left behind.
func (n *Node) stop(ctx context.Context) {
	if n.Running() {
		_ = n.keeper.Process.Signal(syscall.SIGINT)
		select {
		case <-n.done:
		case <-time.After(30 * time.Second):
			_ = n.killGroup(context.WithoutCancel(ctx))
		case <-ctx.Done():
			_ = n.killGroup(context.WithoutCancel(ctx))
		}
	}
	n.removeLeftShm()
}

// postmasterPID reads the node's postmaster.pid: the postmaster's process
// ID, 0 when PostgreSQL is not running or the file is unreadable.
func (n *Node) postmasterPID() int {
	lines := n.postmasterLines()
	if len(lines) == 0 {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(lines[0]))
	return pid
}

func (n *Node) postmasterLines() []string {
	fh, err := os.Open(filepath.Join(n.data, "postmaster.pid"))
	if err != nil {
		return nil
	}
	defer fh.Close()
	var lines []string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// removeLeftShm removes the System V shared memory segment of a
// PostgreSQL that was killed and not started again: only a clean exit
// removes it, and each one left counts against the kernel's limit. A
// PostgreSQL started in the directory again removes it itself.
func (n *Node) removeLeftShm() {
	lines := n.postmasterLines()
	if len(lines) < 7 {
		return
	}
	if pid, _ := strconv.Atoi(strings.TrimSpace(lines[0])); pid > 0 && syscall.Kill(pid, 0) == nil {
		return // still running: not ours to remove
	}
	fields := strings.Fields(lines[6]) // "key shmid"
	if len(fields) != 2 {
		return
	}
	if id, err := strconv.Atoi(fields[1]); err == nil && id > 0 {
		_ = exec.Command("ipcrm", "-m", strconv.Itoa(id)).Run()
	}
}

// logTail is the last three lines of the node's log, for errors.
func (n *Node) logTail() string {
	b, err := os.ReadFile(n.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-3):], " / ") + " (log " + n.log + ")"
}

// errNotYet is what a wait's condition returns while the formation is not
// there yet.
var errNotYet = errors.New("not yet")

func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}
