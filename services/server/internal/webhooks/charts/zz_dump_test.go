package charts_test

import (
	"os"
	"testing"
	"time"

	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/charts"
)

func TestDump(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	v := &webhooks.StatsView{Since: t0, Until: t0.Add(24 * time.Hour), StepSeconds: 3600, OK: 500, Failed: 40, SuccessRate: f(0.93)}
	for i := 0; i < 24; i++ {
		it := webhooks.StatsInterval{Start: t0.Add(time.Duration(i) * time.Hour), OK: int64(10 + i*2), Failed: int64(i % 5)}
		if i != 7 {
			it.LatencyP50Seconds, it.LatencyP95Seconds = f(0.1+float64(i%4)*0.05), f(0.4+float64(i%6)*0.1)
		}
		v.Intervals = append(v.Intervals, it)
	}
	os.WriteFile("/tmp/pd/c.svg", []byte(charts.Attempts(v, nil)), 0o644)
}
