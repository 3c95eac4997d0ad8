package sync

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the in-process counters of consumer rounds. The lag gauges are
// computed from the database instead (adapters/postgres.LagCollector), so that
// every role, not only the worker running the rounds, exports them.
type Metrics struct {
	rounds        *prometheus.CounterVec
	roundDuration *prometheus.HistogramVec
	events        *prometheus.CounterVec
	jobs          *prometheus.CounterVec
	lost          *prometheus.CounterVec
}

// NewMetrics registers the round metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bothy_event_consumer_rounds_total",
			Help: "Consumer rounds by result: ok (committed), locked (another worker held the cursor), error (rolled back).",
		}, []string{"consumer", "result"}),
		roundDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bothy_event_consumer_round_duration_seconds",
			Help:    "Duration of committed consumer rounds, from begin to commit.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"consumer"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bothy_event_consumer_events_total",
			Help: "Events processed by committed consumer rounds.",
		}, []string{"consumer"}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bothy_event_consumer_jobs_total",
			Help: "Jobs inserted by committed consumer rounds.",
		}, []string{"consumer"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bothy_event_consumer_lost_events_total",
			Help: "Events removed by retention before the consumer read them.",
		}, []string{"consumer"}),
	}
	reg.MustRegister(m.rounds, m.roundDuration, m.events, m.jobs, m.lost)
	return m
}

// init makes every series of a consumer exist from the start, so rate()
// and absent-data rules see zeros rather than nothing.
func (m *Metrics) init(consumer string) {
	for _, r := range []string{"ok", "locked", "error"} {
		m.rounds.WithLabelValues(consumer, r)
	}
	m.roundDuration.WithLabelValues(consumer)
	m.events.WithLabelValues(consumer)
	m.jobs.WithLabelValues(consumer)
	m.lost.WithLabelValues(consumer)
}

func (m *Metrics) observe(consumer string, res RoundResult, seconds float64, err error) {
	switch {
	case err != nil:
		m.rounds.WithLabelValues(consumer, "error").Inc()
	case res.Locked:
		m.rounds.WithLabelValues(consumer, "locked").Inc()
	default:
		m.rounds.WithLabelValues(consumer, "ok").Inc()
		m.roundDuration.WithLabelValues(consumer).Observe(seconds)
		m.events.WithLabelValues(consumer).Add(float64(res.Events))
		m.jobs.WithLabelValues(consumer).Add(float64(res.Jobs))
		m.lost.WithLabelValues(consumer).Add(float64(res.Lost.Len()))
	}
}
