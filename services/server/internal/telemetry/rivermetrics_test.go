package telemetry_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/telemetry"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// durableOn is the durability barrier on a pool, as the server's event log
// provides it.
type durableOn struct{ pool *pgxpool.Pool }

func (d durableOn) Durable(ctx context.Context) error { return postgres.Durable(ctx, d.pool) }

// outcomeArgs is a job that ends as its Outcome says.
type outcomeArgs struct {
	Outcome string `json:"outcome"`
}

func (outcomeArgs) Kind() string { return "test.outcome" }

type outcomeWorker struct {
	river.WorkerDefaults[outcomeArgs]
	// snoozed holds the ids of jobs that snoozed once.
	snoozed *gosync.Map
}

func (w outcomeWorker) Work(_ context.Context, j *river.Job[outcomeArgs]) error {
	switch j.Args.Outcome {
	case "error":
		return errors.New("fails")
	case "snoozed":
		if _, again := w.snoozed.LoadOrStore(j.ID, true); !again {
			return river.JobSnooze(time.Millisecond)
		}
	case "cancelled":
		return river.JobCancel(errors.New("gives up"))
	case "panicked":
		panic("panics")
	}
	return nil
}

// idleArgs is a job on a queue no client works.
type idleArgs struct{}

func (idleArgs) Kind() string { return "test.idle" }

type idleWorker struct{ river.WorkerDefaults[idleArgs] }

func (idleWorker) Work(context.Context, *river.Job[idleArgs]) error { return nil }

// TestRiverMetrics_CountsJobsByQueueAndKind works jobs of every outcome
// through a River client with RiverMetrics installed, leaves others on a
// queue nobody works, and reads the metrics as a scrape would: runs by
// outcome, run durations and waits by queue and kind, the unfinished jobs
// by state; the exposition passes the client library's linter.
func TestRiverMetrics_CountsJobsByQueueAndKind(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	reg := prometheus.NewRegistry()
	m := telemetry.NewRiverMetrics(reg, db.Pool, durableOn{db.Pool}, &telemetry.RiverMetricsConfig{Logger: quiet})
	workers := river.NewWorkers()
	river.AddWorker(workers, outcomeWorker{snoozed: &gosync.Map{}})
	river.AddWorker(workers, idleWorker{})
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
		Logger: quiet, Workers: workers, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond, MaxAttempts: 1,
		Middleware: []rivertype.Middleware{m},
	})
	require.NoError(t, err)
	ctx := context.Background()
	for _, o := range []string{"completed", "completed", "error", "snoozed", "cancelled", "panicked"} {
		_, err := rc.Insert(ctx, outcomeArgs{Outcome: o}, nil)
		require.NoError(t, err)
	}
	for range 3 {
		_, err := rc.Insert(ctx, idleArgs{}, &river.InsertOpts{Queue: "idle"})
		require.NoError(t, err)
	}
	require.NoError(t, rc.Start(ctx))
	t.Cleanup(func() { require.NoError(t, rc.Stop(context.WithoutCancel(ctx))) })

	run := func(outcome string) float64 {
		return counter(t, reg, "bothy_river_job_runs_total", map[string]string{"queue": river.QueueDefault, "kind": "test.outcome", "outcome": outcome})
	}
	deadline := time.Now().Add(20 * time.Second)
	for run("completed") < 3 || run("error")+run("cancelled")+run("panicked") < 3 {
		require.True(t, time.Now().Before(deadline), "jobs not worked in time: completed %v", run("completed"))
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}

	require.EqualValues(t, 3, run("completed"), "two completed and the snoozed one's second run")
	require.EqualValues(t, 1, run("snoozed"))
	require.EqualValues(t, 1, run("error"))
	require.EqualValues(t, 1, run("cancelled"))
	require.EqualValues(t, 1, run("panicked"))

	// River records a finished job's state after Work returns: wait for
	// every job to leave running.
	wantJobs := `
# HELP bothy_river_jobs River jobs not finished, by queue, kind and state (available, running, retryable, scheduled: snoozed jobs and retries waiting for their time), read from river_job at scrape time.
# TYPE bothy_river_jobs gauge
bothy_river_jobs{kind="test.idle",queue="idle",state="available"} 3
bothy_river_jobs{kind="test.idle",queue="idle",state="retryable"} 0
bothy_river_jobs{kind="test.idle",queue="idle",state="running"} 0
bothy_river_jobs{kind="test.idle",queue="idle",state="scheduled"} 0
bothy_river_jobs{kind="test.outcome",queue="default",state="available"} 0
bothy_river_jobs{kind="test.outcome",queue="default",state="retryable"} 0
bothy_river_jobs{kind="test.outcome",queue="default",state="running"} 0
bothy_river_jobs{kind="test.outcome",queue="default",state="scheduled"} 0
`
	for {
		err := testutil.CollectAndCompare(m, strings.NewReader(wantJobs), "bothy_river_jobs")
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "%v", err)
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	require.Equal(t, 2, testutil.CollectAndCount(m, "bothy_river_job_run_duration_seconds"),
		"a duration histogram per (queue, kind) seen: default/test.outcome and idle/test.idle")
	require.Equal(t, 2, testutil.CollectAndCount(m, "bothy_river_job_wait_seconds"))
	require.EqualValues(t, 7, histogramCount(t, reg, "bothy_river_job_run_duration_seconds", "test.outcome"), "one per run")
	require.EqualValues(t, 7, histogramCount(t, reg, "bothy_river_job_wait_seconds", "test.outcome"))
	problems, err := testutil.CollectAndLint(m)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// TestRiverMetrics_ShowsOnlyDurableState: rounds insert jobs with
// asynchronous commits; a scrape must not count a job that a crash then
// takes back.
func TestRiverMetrics_ShowsOnlyDurableState(t *testing.T) {
	p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
	ctx := context.Background()
	pool := p.Pool(t)
	reg := prometheus.NewRegistry()
	telemetry.NewRiverMetrics(reg, pool, durableOn{pool}, &telemetry.RiverMetricsConfig{Logger: quiet})
	available := map[string]string{"kind": "durability.probe", "state": "available"}

	// Warm up first (see dbtest.BeginAsync): the vacuum removes dead rows
	// the reads would prune, and the scrapes read the catalog once.
	_, err := pool.Exec(ctx, `VACUUM`)
	require.NoError(t, err)
	for range 2 {
		require.Nil(t, series(t, reg, "bothy_river_jobs", available))
	}
	// As a round inserts its jobs: committed with synchronous_commit off.
	dbtest.CommitAsync(t, pool, `INSERT INTO river_job (kind, args, max_attempts) VALUES ('durability.probe', '{}', 1)`)

	require.Equal(t, 1.0, series(t, reg, "bothy_river_jobs", available).GetGauge().GetValue())

	pool = p.CrashAndReopen(t, pool)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'durability.probe'`).Scan(&n))
	require.Equal(t, 1, n, "the scrape counted a job that the crash took back")
}

// series finds the series of family name whose labels include want.
func series(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) *dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue metrics
				}
			}
			return m
		}
	}
	return nil
}

// counter is a counter's value, 0 if its series does not exist.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return series(t, reg, name, labels).GetCounter().GetValue()
}

// histogramCount is the number of observations of a histogram by kind.
func histogramCount(t *testing.T, reg *prometheus.Registry, name, kind string) uint64 {
	t.Helper()
	return series(t, reg, name, map[string]string{"kind": kind}).GetHistogram().GetSampleCount()
}
