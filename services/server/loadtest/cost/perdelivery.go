package cost

import (
	"fmt"
	"io"
	"math"
	"time"
)

// PerDelivery is a window's cost divided by the deliveries it made, in
// the form the load tests' --json line carries it.
type PerDelivery struct {
	Deliveries     int     `json:"deliveries"`
	Seconds        float64 `json:"seconds"`
	DeliveriesPerS float64 `json:"deliveries_per_s"`
	RoundTrips     float64 `json:"db_round_trips_per_delivery"`
	Transactions   float64 `json:"transactions_per_delivery"`
	RiverJobs      float64 `json:"river_jobs_per_delivery"`
	// WALBytes is null on a shared server; Statements is left out without
	// pg_stat_statements.
	WALBytes   *float64 `json:"wal_bytes_per_delivery"`
	Statements *float64 `json:"statements_per_delivery,omitempty"`
	CPU        CPUms    `json:"cpu_ms_per_delivery"`
}

// CPUms is CPU milliseconds per delivery by process; Postgres is null on a
// shared server.
type CPUms struct {
	Worker   float64  `json:"worker"`
	Postgres *float64 `json:"postgres"`
	Receiver float64  `json:"receiver"`
}

// PerDelivery divides t by n deliveries.
func (t *Totals) PerDelivery(n int) PerDelivery {
	d := float64(max(n, 1))
	per := func(v int64) float64 { return round(float64(v) / d) }
	ms := func(v time.Duration) float64 { return round(float64(v) / float64(time.Millisecond) / d) }
	p := PerDelivery{Deliveries: n, Seconds: round(t.Seconds), DeliveriesPerS: round(float64(n) / max(t.Seconds, 1e-9)),
		RoundTrips: per(t.RoundTrips), Transactions: per(t.Transactions), RiverJobs: per(t.RiverJobs),
		CPU: CPUms{Worker: ms(t.Worker), Receiver: ms(t.Receiver)}}
	if t.WALBytes != nil {
		p.WALBytes = new(per(*t.WALBytes))
	}
	if t.Statements != nil {
		p.Statements = new(per(*t.Statements))
	}
	if t.Postgres != nil {
		p.CPU.Postgres = new(ms(*t.Postgres))
	}
	return p
}

// round keeps four decimals: enough for per-delivery figures, short in
// JSON.
func round(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// Print writes p as a few lines of text.
func (p *PerDelivery) Print(w io.Writer) {
	fmt.Fprintf(w, "%d deliveries in %.2fs: %.1f deliveries/s\n", p.Deliveries, p.Seconds, p.DeliveriesPerS)
	fmt.Fprintf(w, "per delivery: %.3f database round trips (worker pool), %.3f transactions, %.4f River jobs, %s statements, %s WAL bytes\n",
		p.RoundTrips, p.Transactions, p.RiverJobs, orNA(p.Statements, "%.2f"), orNA(p.WALBytes, "%.0f"))
	fmt.Fprintf(w, "CPU ms per delivery: worker %.3f, PostgreSQL %s, receiver %.3f\n",
		p.CPU.Worker, orNA(p.CPU.Postgres, "%.3f"), p.CPU.Receiver)
}

func orNA(v *float64, format string) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf(format, *v)
}
