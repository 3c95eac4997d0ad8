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
