package telemetry

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// Outcomes counted by bothy_river_job_runs_total.
var jobOutcomes = []string{"completed", "error", "snoozed", "cancelled", "panicked"}

// jobStates are the states bothy_river_jobs counts: the jobs not finished.
// Finished ones (completed, cancelled, discarded) are most of river_job
// and are never read.
var jobStates = []string{"available", "running", "retryable", "scheduled"}

var jobsDesc = prometheus.NewDesc("bothy_river_jobs",
	"River jobs not finished, by queue, kind and state (available, running, retryable, scheduled: snoozed jobs "+
		"and retries waiting for their time), read from river_job at scrape time.",
	[]string{"queue", "kind", "state"}, nil)

// RiverMetricsConfig configures RiverMetrics.
type RiverMetricsConfig struct {
	// Logger is told when the counts cannot be read. Default slog.Default().
	Logger *slog.Logger
	// Timeout bounds the scrape's query. Default 5s.
	Timeout time.Duration
}

// RiverMetrics exports River's jobs by queue and kind. As a River worker
// middleware (install it in river.Config.Middleware of a client that works
// jobs) it counts every run by outcome and observes its duration and its
// wait from scheduled_at to the worker's fetch (attempted_at; both on the
// database's clock). As a Prometheus collector it counts the unfinished jobs
// with one query per scrape (jobsSQL).
//
// A (queue, kind) seen once keeps its series, at zero when it has no jobs,
// so a queue that drains does not vanish from graphs and alerts. It is safe
// for concurrent use.
type RiverMetrics struct {
	river.MiddlewareDefaults

	pool    *pgxpool.Pool
	durable sync.DurabilityBarrier
	cfg     RiverMetricsConfig

	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	wait     *prometheus.HistogramVec

	mu   gosync.Mutex
	seen map[queueKind]bool
}

type queueKind struct{ queue, kind string }

var _ rivertype.WorkerMiddleware = (*RiverMetrics)(nil)

// NewRiverMetrics registers River's job metrics on reg; the counts read
// pool at every scrape and pass durable before they are exported.
func NewRiverMetrics(reg prometheus.Registerer, pool *pgxpool.Pool, durable sync.DurabilityBarrier, cfg *RiverMetricsConfig) *RiverMetrics {
	c := RiverMetricsConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Timeout = cmp.Or(c.Timeout, 5*time.Second)
	m := &RiverMetrics{
		pool: pool, durable: durable, cfg: c, seen: map[queueKind]bool{},
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bothy_river_job_runs_total",
			Help: "River job runs by queue, kind and outcome: completed, error (retried or discarded by River), snoozed (a wait the job asked for), cancelled, panicked.",
		}, []string{"queue", "kind", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bothy_river_job_run_duration_seconds",
			Help:    "Duration of River job runs (Work, with the middleware inside River's), by queue and kind.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"queue", "kind"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bothy_river_job_wait_seconds",
			Help:    "Time from a River job's scheduled_at (its insert, its retry's or snooze's time) to a worker fetching it (attempted_at), by queue and kind.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
		}, []string{"queue", "kind"}),
	}
	reg.MustRegister(m)
	return m
}

// Work implements rivertype.WorkerMiddleware.
func (m *RiverMetrics) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) (err error) {
	m.see(job.Queue, job.Kind)
	if job.AttemptedAt != nil {
		m.wait.WithLabelValues(job.Queue, job.Kind).Observe(max(job.AttemptedAt.Sub(job.ScheduledAt), 0).Seconds())
	}
	start := time.Now()
	panicked := true
	defer func() {
		m.duration.WithLabelValues(job.Queue, job.Kind).Observe(time.Since(start).Seconds())
		m.runs.WithLabelValues(job.Queue, job.Kind, outcome(err, panicked)).Inc()
	}()
	err = doInner(ctx)
	panicked = false
	return err
}

func outcome(err error, panicked bool) string {
	var snooze *river.JobSnoozeError
	var cancel *river.JobCancelError
	switch {
	case panicked:
		return "panicked"
	case err == nil:
		return "completed"
	case errors.As(err, &snooze):
		return "snoozed"
	case errors.As(err, &cancel):
		return "cancelled"
	}
	return "error"
}

// see records a (queue, kind) and starts its series at zero.
func (m *RiverMetrics) see(queue, kind string) {
	k := queueKind{queue, kind}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[k] {
		return
	}
	m.seen[k] = true
	for _, o := range jobOutcomes {
		m.runs.WithLabelValues(queue, kind, o)
	}
	m.duration.WithLabelValues(queue, kind)
	m.wait.WithLabelValues(queue, kind)
}

// Describe implements prometheus.Collector.
func (m *RiverMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	m.runs.Describe(ch)
	m.duration.Describe(ch)
	m.wait.Describe(ch)
}

// jobsSQL counts the unfinished jobs. The state leads River's fetching
// index (river_job_prioritized_fetching_index), so the query reads those
// jobs only, never the finished ones that fill river_job: its cost follows
// the backlog, not the table.
const jobsSQL = `
SELECT queue, kind, state::text, count(*) FROM river_job
WHERE state IN ('available', 'running', 'retryable', 'scheduled')
GROUP BY queue, kind, state`

// Collect implements prometheus.Collector. Rounds insert jobs with commits
// that are not durable yet when others can read them, so the counts pass
// the durability barrier after the read: a scrape never counts a job a
// crash takes back. If the counts cannot be read or made durable it logs
// and leaves bothy_river_jobs out of this scrape: an invalid metric would
// fail the whole scrape and take the process's other metrics with it.
func (m *RiverMetrics) Collect(ch chan<- prometheus.Metric) {
	m.collectJobs(ch)
	m.runs.Collect(ch)
	m.duration.Collect(ch)
	m.wait.Collect(ch)
}

func (m *RiverMetrics) collectJobs(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout)
	defer cancel()
	rows, err := m.pool.Query(ctx, jobsSQL)
	if err != nil {
		m.cfg.Logger.Warn("river metrics: count jobs", slog.Any("error", err))
		return
	}
	counts := map[queueKind]map[string]float64{}
	for rows.Next() {
		var k queueKind
		var state string
		var n int64
		if err := rows.Scan(&k.queue, &k.kind, &state, &n); err != nil {
			rows.Close()
			m.cfg.Logger.Warn("river metrics: count jobs", slog.Any("error", err))
			return
		}
		if counts[k] == nil {
			counts[k] = map[string]float64{}
		}
		counts[k][state] = float64(n)
	}
	err = rows.Err()
	if err == nil {
		err = m.durable.Durable(ctx)
	}
	if err != nil {
		m.cfg.Logger.Warn("river metrics: count jobs", slog.Any("error", err))
		return
	}
	for k := range counts {
		m.see(k.queue, k.kind)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.seen {
		for _, s := range jobStates {
			ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, counts[k][s], k.queue, k.kind, s)
		}
	}
}
