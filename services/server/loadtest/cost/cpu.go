package cost

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// which Linux fixes at 100 on the architectures Go runs on.
const clockTick = 10 * time.Millisecond

// SelfCPU is the CPU time (user and system) this process has used.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procTimes is what /proc/<pid>/stat says about a process.
type procTimes struct {
	ppid int
	// own is utime + stime; children is cutime + cstime: what its exited
	// children used, once it reaped them.
	own, children time.Duration
}

// readProc reads /proc/<pid>/stat.
func readProc(pid int) (procTimes, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procTimes{}, err
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// the fields after its closing parenthesis start with field 3, state.
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return procTimes{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return procTimes{}, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	n := make([]int64, 5)
	// ppid is field 4; utime, stime, cutime, cstime fields 14 to 17.
	for i, idx := range []int{1, 11, 12, 13, 14} {
		if n[i], err = strconv.ParseInt(f[idx], 10, 64); err != nil {
			return procTimes{}, fmt.Errorf("/proc/%d/stat: field %d: %w", pid, idx+3, err)
		}
	}
	return procTimes{ppid: int(n[0]), own: time.Duration(n[1]+n[2]) * clockTick, children: time.Duration(n[3]+n[4]) * clockTick}, nil
}

// ProcessCPU is the CPU time a process has used itself (utime + stime).
func ProcessCPU(pid int) (time.Duration, error) {
	t, err := readProc(pid)
	return t.own, err
}

// TreeCPU is the CPU time of a process and its children, as for a
// PostgreSQL postmaster and its server processes: the parent's own time,
// what its exited children used (reaped into its cutime and cstime) and
// the own time of every live child.
func TreeCPU(pid int) (time.Duration, error) {
	root, err := readProc(pid)
	if err != nil {
		return 0, err
	}
	total := root.own + root.children
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		t, err := readProc(child)
		if err != nil || t.ppid != pid {
			continue // not a child, or it exited meanwhile (then its time is in the parent's cutime)
		}
		total += t.own
	}
	return total, nil
}
