package cost

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/dbconn"
)

// MeterParams says what a Meter measures.
type MeterParams struct {
	// DB reads the measured database's counters. Required.
	DB *Database
	// Trips counts the measured role's round trips (installed on its pool),
	// when it runs in this process; nil otherwise.
	Trips *dbconn.RoundTrips
	// Postmaster is the PID of the server's postmaster when the server
	// serves this run only: its CPU time and WAL are then the run's. 0 on a
	// shared server, where neither is measured.
	Postmaster int
	// Receiver is the PID of the process that receives the deliveries.
	// Required.
	Receiver int
	// ScratchURL connects to the measured database, where the River jobs of
	// RiverKind are counted. Required.
	ScratchURL, RiverKind string
	// RiverKeeps is how long River keeps finished jobs (RiverKeeps): a
	// window at least that long is refused, since its jobs may have been
	// deleted before they were counted. Required.
	RiverKeeps time.Duration
	// Quiet bounds each wait for the database to have no session left.
	// Default 1 minute.
	Quiet time.Duration
}

// sample is what the processes and the server read at one moment.
type sample struct {
	at                      time.Time
	self, postgres, receive time.Duration
	wal, trips              int64
}

// Meter measures one window of a load: from Start, when no session is
// connected to the database, to Mark (the last delivery arrived) for time,
// CPU and WAL, and to Finish, when every session has ended again, for the
// database's transactions, statements and River jobs. It runs in the
// process that runs the measured role, whose own CPU time it takes as that
// role's.
type Meter struct {
	p                MeterParams
	start, mark      sample
	xacts, highJobID int64
}

// NewMeter returns a Meter for p.
func NewMeter(p *MeterParams) *Meter {
	q := *p
	if q.Quiet == 0 {
		q.Quiet = time.Minute
	}
	return &Meter{p: q}
}

// Start opens the window. The caller has closed its own sessions on the
// database; Start waits until every session has ended, so the counts it
// reads are complete.
func (m *Meter) Start(ctx context.Context) error {
	var err error
	if m.highJobID, err = highJobID(ctx, m.p.ScratchURL); err != nil {
		return err
	}
	if err := m.p.DB.AwaitQuiet(ctx, m.p.Quiet); err != nil {
		return err
	}
	if m.xacts, err = m.p.DB.Transactions(ctx); err != nil {
		return err
	}
	if err := m.p.DB.ResetStatements(ctx); err != nil {
		return err
	}
	m.start, err = m.sample(ctx)
	return err
}

// Mark ends the window for time, CPU and WAL.
func (m *Meter) Mark(ctx context.Context) error {
	var err error
	m.mark, err = m.sample(ctx)
	return err
}

func (m *Meter) sample(ctx context.Context) (sample, error) {
	s := sample{at: time.Now(), self: SelfCPU(), trips: m.p.Trips.Total()}
	var err error
	if s.receive, err = ProcessCPU(m.p.Receiver); err != nil {
		return s, fmt.Errorf("cost: receiver CPU: %w", err)
	}
	if m.p.Postmaster == 0 {
		return s, nil
	}
	if s.postgres, err = TreeCPU(m.p.Postmaster); err != nil {
		return s, fmt.Errorf("cost: PostgreSQL CPU: %w", err)
	}
	if s.wal, err = m.p.DB.WALPosition(ctx); err != nil {
		return s, err
	}
	return s, nil
}

// Totals is what a window cost.
type Totals struct {
	// Seconds runs from Start to Mark.
	Seconds float64
	// RoundTrips is the measured pool's, to Mark; RoundTripKinds breaks
	// them down.
	RoundTrips     int64
	RoundTripKinds string
	// Transactions, Statements and RiverJobs are the database's to Finish.
	// Statements is nil without pg_stat_statements.
	Transactions, RiverJobs int64
	Statements              *int64
	// WALBytes and Postgres are nil on a shared server.
	WALBytes *int64
	// CPU time of this process (the measured role), the server and the
	// receiver, to Mark.
	Worker, Receiver time.Duration
	Postgres         *time.Duration
}

// Finish waits until every session on the database has ended (the caller
// stopped the role) and returns the window's totals.
func (m *Meter) Finish(ctx context.Context) (*Totals, error) {
	if m.mark.at.IsZero() {
		return nil, fmt.Errorf("cost: Finish before Mark")
	}
	if took := time.Since(m.start.at); took >= m.p.RiverKeeps {
		return nil, fmt.Errorf("cost: the window (%s) outlasted River's retention of finished jobs (%s): jobs may be gone", took, m.p.RiverKeeps)
	}
	if err := m.p.DB.AwaitQuiet(ctx, m.p.Quiet); err != nil {
		return nil, err
	}
	t := &Totals{Seconds: m.mark.at.Sub(m.start.at).Seconds(), RoundTrips: m.mark.trips - m.start.trips,
		RoundTripKinds: m.p.Trips.String(), Worker: m.mark.self - m.start.self, Receiver: m.mark.receive - m.start.receive}
	x, err := m.p.DB.Transactions(ctx)
	if err != nil {
		return nil, err
	}
	t.Transactions = x - m.xacts
	if m.p.DB.Statements {
		n, err := m.p.DB.StatementCalls(ctx)
		if err != nil {
			return nil, err
		}
		t.Statements = &n
	}
	if m.p.Postmaster != 0 {
		wal, pg := m.mark.wal-m.start.wal, m.mark.postgres-m.start.postgres
		t.WALBytes, t.Postgres = &wal, &pg
	}
	if t.RiverJobs, err = jobsAfter(ctx, m.p.ScratchURL, m.p.RiverKind, m.highJobID); err != nil {
		return nil, err
	}
	return t, nil
}

// highJobID is the highest River job id in the database: jobs inserted
// later have higher ones.
func highJobID(ctx context.Context, url string) (int64, error) {
	var id int64
	err := withConn(ctx, url, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM river_job`).Scan(&id)
	})
	return id, err
}

// jobsAfter counts the River jobs of kind with an id above after.
func jobsAfter(ctx context.Context, url, kind string, after int64) (int64, error) {
	var n int64
	err := withConn(ctx, url, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND id > $2`, kind, after).Scan(&n)
	})
	return n, err
}

func withConn(ctx context.Context, url string, f func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("cost: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := f(conn); err != nil {
		return fmt.Errorf("cost: River jobs: %w", err)
	}
	return nil
}

// RiverKeeps is how long a River client with rc keeps finished jobs
// before its cleaner deletes them: the shortest of its retention periods
// (River's defaults where unset, -1 meaning forever).
func RiverKeeps(rc *river.Config) time.Duration {
	keep := time.Duration(math.MaxInt64)
	for _, p := range []struct{ set, def time.Duration }{
		{rc.CompletedJobRetentionPeriod, 24 * time.Hour},
		{rc.CancelledJobRetentionPeriod, 24 * time.Hour},
		{rc.DiscardedJobRetentionPeriod, 7 * 24 * time.Hour},
	} {
		switch {
		case p.set == -1:
		case p.set == 0:
			keep = min(keep, p.def)
		default:
			keep = min(keep, p.set)
		}
	}
	return keep
}
