package push

import "github.com/prometheus/client_golang/prometheus"

// Delivery results, the values of the result label.
const (
	resultSent    = "sent"    // the push service accepted the message
	resultGone    = "gone"    // 404/410: the registration was removed
	resultDenied  = "denied"  // authz said no, the device was removed or muted, or changed hands
	resultExpired = "expired" // older than push.ttl
	resultRetry   = "retry"   // 429, 5xx, a network error or a first request without an answer: tried again later
	resultFailed  = "failed"  // another answer, or a second request without one: not tried again
	// resultAlreadySent: the job ran again (a retry for other messages of its
	// batch, or a rerun) and found the message recorded as sent, so it sent
	// nothing.
	resultAlreadySent = "already_sent"
)

var results = []string{resultSent, resultGone, resultDenied, resultExpired, resultRetry, resultFailed, resultAlreadySent}

// Metrics are the push delivery metrics.
type Metrics struct {
	deliveries *prometheus.CounterVec
	unrecorded prometheus.Counter
	send       prometheus.Histogram
	handoff    prometheus.Histogram
}

// NewMetrics registers the push metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bothy_push_deliveries_total",
			Help: "Push messages by the result of one run of their push.deliver job: sent, gone, denied, expired, retry, failed, already_sent (a later run of the job, a retry for other messages of its batch or a rerun, found the send recorded and sent nothing).",
		}, []string{"result"}),
		unrecorded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bothy_push_sends_unrecorded_total",
			Help: "Messages the push service accepted whose record in push_sends failed: a rerun of their job would send them again.",
		}),
		send: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bothy_push_send_duration_seconds",
			Help:    "Duration of one request to a push service, encryption included.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		handoff: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bothy_push_handoff_seconds",
			Help:    "Time from the event's commit to the push service accepting the message (perf.push_handoff_p95 bounds its p95).",
			Buckets: []float64{.0025, .005, .01, .015, .025, .05, .1, .25, .5, 1, 5, 30, 300},
		}),
	}
	reg.MustRegister(m.deliveries, m.unrecorded, m.send, m.handoff)
	for _, r := range results {
		m.deliveries.WithLabelValues(r)
	}
	return m
}
