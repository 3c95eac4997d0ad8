package deploy

import (
	"context"
	"fmt"
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
	if u.Receiver, err = cost.ProcessCPU(o.Receiver); err != nil {
		return u, fmt.Errorf("receiver CPU: %w", err)
	}
	if u.Postgres, err = cost.TreeCPU(o.Postmaster); err != nil {
		return u, fmt.Errorf("PostgreSQL CPU: %w", err)
	}
	u.WAL, err = o.DB.WALPosition(ctx)
	return u, err
}

// PhaseCost is what a measured phase cost.
type PhaseCost struct {
	Seconds                          float64
	API, Workers, Postgres, Receiver time.Duration
	// PostgresBy is the backends' CPU time by the class of bothy they
	// serve (Class).
	PostgresBy map[string]time.Duration
	WAL        int64
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
	return PhaseCost{Seconds: after.At.Sub(before.At).Seconds(), API: after.API - before.API, Workers: after.Workers - before.Workers,
		Postgres: after.Postgres - before.Postgres, Receiver: after.Receiver - before.Receiver,
		PostgresBy: d.Backends.ByClass(), WAL: after.WAL - before.WAL}, nil
}
