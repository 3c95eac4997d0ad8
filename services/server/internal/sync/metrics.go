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
	roundEvents   *prometheus.HistogramVec
	roundJobs     *prometheus.HistogramVec
	batch         *prometheus.GaugeVec
	events        *prometheus.CounterVec
	jobs          *prometheus.CounterVec
	lost          *prometheus.CounterVec
}

// Round results, the values of bothy_event_consumer_rounds_total's result.
const (
	resultOK      = "ok"      // committed
	resultLocked  = "locked"  // another round held the cursor
	resultTimeout = "timeout" // rolled back: out of time (isTimeout)
	resultError   = "error"   // rolled back: anything else
)

// sizeBuckets suit counts of events and jobs per round: 1 to 100,000.
var sizeBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 100000}

// NewMetrics registers the round metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bothy_event_consumer_rounds_total",
			Help: "Consumer rounds by result: ok (committed), locked (another worker held the cursor), timeout (rolled back, out of consumer.round_timeout or a statement timeout: the next round reads half the events), error (rolled back for another reason).",
		}, []string{"consumer", "result"}),
		roundDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bothy_event_consumer_round_duration_seconds",
			Help:    "Duration of committed consumer rounds, from begin to commit.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60},
		}, []string{"consumer"}),
		roundEvents: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bothy_event_consumer_round_events",
			Help:    "Events a committed round that read any processed: at most the batch, fewer when the round's work budget (consumer.round_max_jobs, consumer.round_max_receivers) ended it early.",
			Buckets: sizeBuckets,
		}, []string{"consumer"}),
		roundJobs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bothy_event_consumer_round_jobs",
			Help:    "Jobs a committed round that read events inserted.",
			Buckets: append([]float64{0}, sizeBuckets...),
		}, []string{"consumer"}),
		batch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bothy_event_consumer_batch_size",
			Help: "Most events the consumer's next round reads: consumer.batch_size, or less after rounds that timed out.",
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
	reg.MustRegister(m.rounds, m.roundDuration, m.roundEvents, m.roundJobs, m.batch, m.events, m.jobs, m.lost)
	return m
}

// init makes every series of a consumer exist from the start, so rate()
// and absent-data rules see zeros rather than nothing.
func (m *Metrics) init(consumer string, batch int) {
	for _, r := range []string{resultOK, resultLocked, resultTimeout, resultError} {
		m.rounds.WithLabelValues(consumer, r)
	}
	m.roundDuration.WithLabelValues(consumer)
	m.roundEvents.WithLabelValues(consumer)
	m.roundJobs.WithLabelValues(consumer)
	m.batch.WithLabelValues(consumer).Set(float64(batch))
	m.events.WithLabelValues(consumer)
	m.jobs.WithLabelValues(consumer)
	m.lost.WithLabelValues(consumer)
}

// roundOutcome is what the metrics learn of one round.
type roundOutcome struct {
	res      RoundResult
	seconds  float64
	err      error
	timedOut bool
	// batch is the size of the consumer's next round.
	batch int
}

func (m *Metrics) observe(consumer string, o *roundOutcome) {
	m.batch.WithLabelValues(consumer).Set(float64(o.batch))
	switch {
	case o.timedOut:
		m.rounds.WithLabelValues(consumer, resultTimeout).Inc()
	case o.err != nil:
		m.rounds.WithLabelValues(consumer, resultError).Inc()
	case o.res.Locked:
		m.rounds.WithLabelValues(consumer, resultLocked).Inc()
	default:
		m.rounds.WithLabelValues(consumer, resultOK).Inc()
		m.roundDuration.WithLabelValues(consumer).Observe(o.seconds)
		if o.res.Events > 0 {
			m.roundEvents.WithLabelValues(consumer).Observe(float64(o.res.Events))
			m.roundJobs.WithLabelValues(consumer).Observe(float64(o.res.Jobs))
		}
		m.events.WithLabelValues(consumer).Add(float64(o.res.Events))
		m.jobs.WithLabelValues(consumer).Add(float64(o.res.Jobs))
		m.lost.WithLabelValues(consumer).Add(float64(o.res.Lost.Len()))
	}
}
