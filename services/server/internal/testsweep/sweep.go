package testsweep

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Limits of one directory's stop: how long its servers get for an
// immediate shutdown before everything left is killed, and how long the
// kill may take.
const (
	shutdownLimit = 30 * time.Second
	killLimit     = 10 * time.Second
)

// Sweep stops what the owned directories in os.TempDir() whose owner is
// gone still run and removes them. It returns the directories it
// removed. Errors leave a directory for a later sweep.
func Sweep() []string { return sweepRoot(os.TempDir()) }

// sweepRoot sweeps the owned directories directly in root.
func sweepRoot(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var swept []string
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if !e.IsDir() || !orphaned(dir) {
			continue
		}
		stopHeld(dir)
		if os.RemoveAll(dir) == nil {
			swept = append(swept, dir)
		}
	}
	return swept
}

// orphaned reports whether dir carries a marker, written by this user (or
// the caller is root), whose owner is gone.
func orphaned(dir string) bool {
	o, ok := readMarker(dir)
	if !ok {
		return false
	}
	st, err := os.Stat(filepath.Join(dir, MarkerName))
	if err != nil {
		return false
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || (os.Geteuid() != 0 && int(sys.Uid) != os.Geteuid()) {
		return false
	}
	return o.state() == ownerGone
}

// stopHeld stops the processes dir holds: keepers and other programs are
// killed first, so none starts a server again; each postmaster whose
// postmaster.pid is in dir gets SIGQUIT, PostgreSQL's immediate shutdown
// (what pg_ctl -m immediate stop sends), which ends its children and
// frees its shared memory; what is left after shutdownLimit is killed.
// Then it frees the shared memory of servers that died without freeing
// it.
func stopHeld(dir string) {
	held := heldProcesses(dir)
	postmasters := postmastersIn(dir)
	isPM := map[int]bool{}
	for _, p := range held {
		if postmasters[p.pid] {
			isPM[p.pid] = true
		}
	}
	for _, p := range held {
		if !isPM[p.pid] && !isPM[p.ppid] {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
	for _, p := range held {
		if isPM[p.pid] {
			_ = syscall.Kill(p.pid, syscall.SIGQUIT)
		}
	}
	if !waitGone(held, shutdownLimit) {
		for _, p := range held {
			if p.alive() {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
		waitGone(held, killLimit)
	}
	removeLeftShm(dir)
}

// heldProcesses are the processes running that belong to dir (heldBy).
func heldProcesses(dir string) []process {
	var held []process
	for _, p := range processes() {
		if p.heldBy(dir) {
			held = append(held, p)
		}
	}
	return held
}

// waitGone polls until none of ps runs, for at most limit.
func waitGone(ps []process, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		left := false
		for _, p := range ps {
			left = left || p.alive()
		}
		if !left {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond) // polling the processes, with a deadline
	}
}

// postmasterFiles finds the postmaster.pid files in dir (data
// directories sit a few levels down at most).
func postmasterFiles(dir string) []string {
	var files []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && strings.Count(strings.TrimPrefix(path, dir), "/") > 4 {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "postmaster.pid" {
			files = append(files, path)
		}
		return nil
	})
	return files
}

// postmastersIn are the process ids the postmaster.pid files in dir name.
func postmastersIn(dir string) map[int]bool {
	pids := map[int]bool{}
	for _, f := range postmasterFiles(dir) {
		if lines := readLines(f); len(lines) > 0 {
			if pid, err := strconv.Atoi(strings.TrimSpace(lines[0])); err == nil && pid > 0 {
				pids[pid] = true
			}
		}
	}
	return pids
}

// removeLeftShm removes the System V shared memory segment a postmaster
// that was killed left: a clean exit, an immediate shutdown too, removes
// it and postmaster.pid, so a postmaster.pid still there after its
// processes are gone names a segment nobody removed.
func removeLeftShm(dir string) {
	for _, f := range postmasterFiles(dir) {
		lines := readLines(f)
		if len(lines) < 7 {
			continue
		}
		if pid, _ := strconv.Atoi(strings.TrimSpace(lines[0])); pid > 0 && syscall.Kill(pid, 0) == nil {
			continue // running: not a leftover
		}
		fields := strings.Fields(lines[6]) // "key shmid"
		if len(fields) != 2 {
			continue
		}
		if id, err := strconv.Atoi(fields[1]); err == nil && id > 0 {
			_ = exec.Command("ipcrm", "-m", strconv.Itoa(id)).Run()
		}
	}
}

// readLines returns the lines of a small file, or nil if it cannot be read.
func readLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}
