package liveness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// RescuerConfig configures a Rescuer.
type RescuerConfig struct {
	// Interval between two checks; the first runs at once. Default 1s.
	Interval time.Duration
	// Settle is the settle interval of SettledSQL: how long after a loss
	// of every session no process is judged dead. Default Settle.
	Settle time.Duration
	// QueryTimeout bounds one check. Default 10s.
	QueryTimeout time.Duration
	// Registerer, if set, gets bothy_liveness_rescued_jobs_total.
	Registerer prometheus.Registerer
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

func (c *RescuerConfig) validate() error {
	switch {
	case c.Interval < 0:
		return errors.New("liveness rescuer config: Interval must not be negative")
	case c.Settle < 0:
		return errors.New("liveness rescuer config: Settle must not be negative")
	case c.QueryTimeout < 0:
		return errors.New("liveness rescuer config: QueryTimeout must not be negative")
	}
	return nil
}

// Rescuer makes the River jobs that a dead process left running available
// again, within seconds, where River's own rescuer waits
// river.rescue_stuck_jobs_after beyond the job's timeout. A process is dead
// when its liveness lock is free (GoneSQL). Every worker process runs one;
// the update re-checks each job's state and owner on the row it locks, so
// a job another check handed back meanwhile is left alone.
//
// A job on its last attempt is discarded and one whose cancellation was
// asked for is cancelled, as River's rescuer does; every rescue appends an
// error to the job's errors and counts river:rescue_count in its metadata.
type Rescuer struct {
	pool   *pgxpool.Pool
	holder *Holder
	cfg    RescuerConfig
	count  *prometheus.CounterVec
}

// NewRescuer returns a rescuer that judges others only while holder holds
// this process's lock.
func NewRescuer(pool *pgxpool.Pool, holder *Holder, cfg *RescuerConfig) (*Rescuer, error) {
	c := RescuerConfig{}
	if cfg != nil {
		c = *cfg
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	c.Interval = cmp.Or(c.Interval, time.Second)
	c.Settle = cmp.Or(c.Settle, Settle)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, 10*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	r := &Rescuer{pool: pool, holder: holder, cfg: c, count: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bothy_liveness_rescued_jobs_total",
		Help: "River jobs that a dead process left running, made available again (or discarded, or cancelled) by this process.",
	}, []string{"kind"})}
	if c.Registerer != nil {
		c.Registerer.MustRegister(r.count)
	}
	return r, nil
}

// Rescued is one job a check took from a dead process.
type Rescued struct {
	ID    int64
	Kind  string
	State string // available, discarded or cancelled
	Owner string // the dead process's client ID
}

// rescueSQL finds the processes taking part in liveness that River believes
// run jobs, keeps those whose lock is free, and hands their running jobs
// back. The running jobs are found through River's index on state; there
// are as many as jobs in flight. The update re-checks state and owner on
// the row it locks, so a job that finished or was fetched again meanwhile
// is left alone.
var rescueSQL = `
WITH owners AS (
    SELECT DISTINCT attempted_by[array_upper(attempted_by, 1)] AS owner
    FROM river_job
    WHERE state = 'running' AND attempted_by[array_upper(attempted_by, 1)] LIKE '` + IDPrefix + `%'
), gone AS (
    SELECT owner FROM owners WHERE owner <> $1 AND ` + GoneSQL("owner", "$2") + `
)
UPDATE river_job j SET
    state = CASE WHEN j.metadata ? 'cancel_attempted_at' THEN 'cancelled'
                 WHEN j.attempt >= j.max_attempts THEN 'discarded'
                 ELSE 'available' END::river_job_state,
    finalized_at = CASE WHEN j.metadata ? 'cancel_attempted_at' OR j.attempt >= j.max_attempts THEN now() END,
    scheduled_at = CASE WHEN j.metadata ? 'cancel_attempted_at' OR j.attempt >= j.max_attempts THEN j.scheduled_at ELSE now() END,
    errors = array_append(j.errors, jsonb_build_object('at', now(), 'attempt', j.attempt, 'trace', '',
        'error', 'rescued: the process of River client ' || gone.owner || ' ended while the job ran (its liveness lock was free)')),
    metadata = j.metadata || jsonb_build_object('river:rescue_count',
        coalesce(CASE WHEN jsonb_typeof(j.metadata -> 'river:rescue_count') = 'number'
                      THEN (j.metadata ->> 'river:rescue_count')::int END, 0) + 1)
FROM gone
WHERE j.state = 'running' AND j.attempted_by[array_upper(j.attempted_by, 1)] = gone.owner
RETURNING j.id, j.kind, j.state::text, gone.owner`

// RescueOnce runs one check now, whatever the holder's state, and returns
// what it rescued.
func (r *Rescuer) RescueOnce(ctx context.Context) ([]Rescued, error) {
	var out []Rescued
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, rescueSQL, r.holder.ID(), r.cfg.Settle.Milliseconds())
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Rescued, error) {
			var x Rescued
			err := row.Scan(&x.ID, &x.Kind, &x.State, &x.Owner)
			return x, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rescue jobs of dead processes: %w", err)
	}
	for _, x := range out {
		r.count.WithLabelValues(x.Kind).Inc()
		r.cfg.Logger.InfoContext(ctx, "rescued a job of a dead process", slog.Int64("job_id", x.ID),
			slog.String("kind", x.Kind), slog.String("state", x.State), slog.String("owner", x.Owner))
	}
	return out, nil
}

// Run checks at once and then every Interval until ctx is cancelled, and
// returns nil then. It skips checks while this process holds no lock of
// its own: a process that may itself be judged dead judges no other.
func (r *Rescuer) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
		if r.holder.HeldFor() == 0 {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
		_, err := r.RescueOnce(qctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.WarnContext(ctx, "liveness rescuer", slog.Any("error", err))
		}
	}
}
