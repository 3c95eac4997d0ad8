package deploy

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/bothy/bothy/services/server/loadtest/cost"
)

// Others are the processes a load measures besides the deployment's.
type Others struct {
	// Receiver is the process that receives what the workers send.
	Receiver int
	// Postmaster is the PostgreSQL server's, which serves this load only.
	Postmaster int
	// DB reads the server's WAL position.
	DB *cost.Database
}

// Usage is what the deployment's processes and the server have used up
// to one moment.
type Usage struct {
	At       time.Time
	API      time.Duration
	Workers  time.Duration
	Postgres time.Duration
	Receiver time.Duration
	// WAL is the server's WAL position in bytes.
	WAL int64
	// APIRoundTrips and WorkerRoundTrips are the processes' round trips
	// to PostgreSQL (bothy_database_round_trips_total); RoundTrips is
	// false when the binary does not count them.
	APIRoundTrips, WorkerRoundTrips float64
	RoundTrips                      bool
}

// Usage reads the CPU time of the api, the workers, the receiver and the
// whole PostgreSQL server, and the WAL position.
func (d *Deployment) Usage(ctx context.Context, o *Others) (Usage, error) {
	u := Usage{At: time.Now()}
	var err error
	if u.API, err = d.API.CPU(); err != nil {
		return u, fmt.Errorf("api CPU: %w", err)
	}
	for _, w := range d.Workers {
		t, err := w.CPU()
		if err != nil {
			return u, fmt.Errorf("worker CPU: %w", err)
		}
		u.Workers += t
	}
	if err := d.roundTrips(ctx, &u); err != nil {
		return u, err
	}
	if u.Receiver, err = cost.ProcessCPU(o.Receiver); err != nil {
		return u, fmt.Errorf("receiver CPU: %w", err)
	}
	if u.Postgres, err = cost.TreeCPU(o.Postmaster); err != nil {
		return u, fmt.Errorf("PostgreSQL CPU: %w", err)
	}
	u.WAL, err = o.DB.WALPosition(ctx)
	return u, err
}

// roundTrips reads the processes' round trips into u.
func (d *Deployment) roundTrips(ctx context.Context, u *Usage) error {
	n, ok, err := d.API.RoundTrips(ctx)
	if err != nil || !ok {
		return err
	}
	u.APIRoundTrips, u.RoundTrips = n, true
	for _, w := range d.Workers {
		n, ok, err := w.RoundTrips(ctx)
		if err != nil {
			return err
		}
		u.WorkerRoundTrips += n
		u.RoundTrips = u.RoundTrips && ok
	}
	return nil
}

// PhaseCost is what a measured phase cost.
type PhaseCost struct {
	Seconds                          float64
	API, Workers, Postgres, Receiver time.Duration
	// PostgresBy is the backends' CPU time by the class of bothy they
	// serve (Class).
	PostgresBy map[string]time.Duration
	WAL        int64
	// APIRoundTrips and WorkerRoundTrips are the processes' round trips to
	// PostgreSQL in the phase; nil when the binary does not count them.
	APIRoundTrips, WorkerRoundTrips *float64
}

// BeginPhase opens a measured phase: it samples the backends, so that
// only what they use from now counts, and what every process used so far.
func (d *Deployment) BeginPhase(ctx context.Context, o *Others) (Usage, error) {
	if err := d.Backends.Sample(ctx); err != nil {
		return Usage{}, err
	}
	d.Backends.Start()
	return d.Usage(ctx, o)
}

// EndPhase is what the phase cost since before.
func (d *Deployment) EndPhase(ctx context.Context, o *Others, before Usage) (PhaseCost, error) {
	if err := d.Backends.Sample(ctx); err != nil {
		return PhaseCost{}, err
	}
	after, err := d.Usage(ctx, o)
	if err != nil {
		return PhaseCost{}, err
	}
	c := PhaseCost{Seconds: after.At.Sub(before.At).Seconds(), API: after.API - before.API, Workers: after.Workers - before.Workers,
		Postgres: after.Postgres - before.Postgres, Receiver: after.Receiver - before.Receiver,
		PostgresBy: d.Backends.ByClass(), WAL: after.WAL - before.WAL}
	if before.RoundTrips && after.RoundTrips {
		c.APIRoundTrips = new(after.APIRoundTrips - before.APIRoundTrips)
		c.WorkerRoundTrips = new(after.WorkerRoundTrips - before.WorkerRoundTrips)
	}
	return c, nil
}

// RoundTripsPer is the api's round trips per event and the workers' per
// delivery (or message) in the phase, to three decimals; nil when the
// binary does not count them.
func (c *PhaseCost) RoundTripsPer(events, deliveries int) (api, workers *float64) {
	if c.APIRoundTrips == nil {
		return nil, nil
	}
	per := func(v float64, n int) *float64 { return new(math.Round(v/float64(max(n, 1))*1000) / 1000) }
	return per(*c.APIRoundTrips, events), per(*c.WorkerRoundTrips, deliveries)
}
