package harness

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// Quantile is the nearest-rank quantile q of sorted values; 0 if there
// are none.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// MS formats d in milliseconds with two decimals.
func MS(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

// LoadAvg reads the machine's 1, 5 and 15 minute load averages ("" where
// /proc/loadavg does not exist). The figures of a shared machine depend on
// it, so summaries state it.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// Stage is the quantiles of one part of a hand-off.
type Stage struct {
	Name          string
	N             int
	P50, P95, P99 time.Duration
}

// NewStage sorts d and takes its quantiles.
func NewStage(name string, d []time.Duration) Stage {
	slices.Sort(d)
	return Stage{Name: name, N: len(d), P50: Quantile(d, .5), P95: Quantile(d, .95), P99: Quantile(d, .99)}
}
