package pushhandoff

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSample is where the CPU went up to a moment: this process (producers,
// worker, receiver) and, where /proc/stat exists, the whole machine. The
// hand-off's latency follows how busy the machine is far more than any
// setting, so the summary says it next to the figures.
type cpuSample struct {
	at          time.Time
	self        time.Duration
	busy, steal uint64 // clock ticks, all CPUs
	total       uint64
	machine     bool
}

func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return s
	}
	var v [8]uint64 // user nice system idle iowait irq softirq steal
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return s
		}
	}
	s.busy = v[0] + v[1] + v[2] + v[5] + v[6]
	s.steal = v[7]
	s.total = s.busy + v[3] + v[4] + v[7]
	s.machine = true
	return s
}

// cpuSummary describes the CPU used between two samples.
func cpuSummary(from, to cpuSample) string {
	wall := to.at.Sub(from.at)
	out := fmt.Sprintf("CPU over the run (%s): this process %.1f s", wall.Round(time.Second), (to.self - from.self).Seconds())
	if from.machine && to.machine && to.total > from.total {
		t := float64(to.total - from.total)
		out += fmt.Sprintf("; machine busy %.0f%%, stolen by the host %.0f%%",
			100*float64(to.busy-from.busy)/t, 100*float64(to.steal-from.steal)/t)
	}
	return out + "\n"
}

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// every Linux this runs on).
const clockTick = 10 * time.Millisecond

// procCPU is the user plus system CPU time a process has used so far,
// from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields count from
	// the last ')'. utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * clockTick, nil
}

// selfCPU is this process's user plus system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
