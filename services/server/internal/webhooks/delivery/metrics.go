package delivery

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/eventexpr"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// Results counted by bothy_webhook_deliveries_total.
var deliveryResults = []string{"delivered", "retry", "dead", "gone", "gap"}

// Metrics are the in-process delivery metrics; the subscription, pending-age
// and stall gauges are read from the database at scrape time, so every role
// exports them, not only the worker that sends.
type Metrics struct {
	deliveries *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	steps      prometheus.Counter
	// Expressions counts the filters (of the consumer's rounds) and
	// transforms (of the senders) that failed on an event.
	Expressions *webhooks.ExpressionErrors
}

// NewMetrics registers the webhook metrics on reg. The gauges read pool at
// every scrape and pass durable before they are exported.
func NewMetrics(reg prometheus.Registerer, pool *pgxpool.Pool, durable sync.DurabilityBarrier, logger *slog.Logger) *Metrics {
	if logger == nil {
		logger = slog.Default()
	}
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bothy_webhook_deliveries_total",
			Help: "Delivery outcomes: delivered (2xx), retry (failed, will be retried), dead (refused by authz or retry budget exhausted), gone (410), gap (event left the log first).",
		}, []string{"result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "bothy_webhook_attempt_duration_seconds",
			Help: "Duration of delivery attempts by destination kind (http, rabbitmq, ...): for http from sending the request to the end " +
				"of the (capped) response body, for a broker from publishing to its confirmation.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"kind"}),
		steps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bothy_webhook_sender_steps_total",
			Help: "Transactions of webhook senders that recorded outcomes or claimed deliveries; divided by bothy_webhook_deliveries_total, what a delivery costs in transactions.",
		}),
	}
	for _, r := range deliveryResults {
		m.deliveries.WithLabelValues(r)
	}
	m.duration.WithLabelValues(outbound.KindHTTP)
	reg.MustRegister(m.deliveries, m.duration, m.steps, &dbCollector{pool: pool, durable: durable, logger: logger})
	m.Expressions = webhooks.NewExpressionErrors(reg)
	return m
}

func (m *Metrics) delivery(result string) {
	if m != nil {
		m.deliveries.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) expressionError(err error) {
	if m != nil {
		m.Expressions.Inc(eventexpr.Transform, err)
	}
}

func (m *Metrics) step() {
	if m != nil {
		m.steps.Inc()
	}
}

func (m *Metrics) attempt(kind string, d time.Duration) {
	if m != nil {
		m.duration.WithLabelValues(cmp.Or(kind, outbound.KindHTTP)).Observe(d.Seconds())
	}
}

// subscriptionStatuses are the values of the status label: active, or the
// cause a subscription was disabled with.
var subscriptionStatuses = []string{"active", "disabled_gap", "disabled_failing", "disabled_gone", "disabled_manual"}

var (
	subsDesc = prometheus.NewDesc("bothy_webhook_subscriptions",
		"Webhook subscriptions by status: active or disabled_<cause>.", []string{"status"}, nil)
	oldestDesc = prometheus.NewDesc("bothy_webhook_oldest_pending_delivery_age_seconds",
		"Age of the oldest pending delivery of an active subscription (0 if none).", nil, nil)
	stallDesc = prometheus.NewDesc("bothy_webhook_delivery_stall_seconds",
		"Longest time an active subscription has had a delivery due and no live sender: since its sender's claim "+
			"ran out or its first due delivery became due, whichever is later (0 if none). Deliveries waiting for "+
			"their retry are not due, so failing receivers do not count.", nil, nil)
)

// dbCollector reads the gauges from the database at scrape time, with one
// query. The deliveries it counts are written by rounds, whose commits are
// not durable yet when others can read them, so it passes the durability
// barrier after the read: a scrape never shows a delivery a crash takes
// back. If the query or the barrier fails it logs and exports none of the
// gauges for this scrape (bothy_event_consumer_status_up tells that the
// database cannot be read): an invalid metric would fail the whole scrape
// and take the process's other metrics with it.
type dbCollector struct {
	pool    *pgxpool.Pool
	durable sync.DurabilityBarrier
	logger  *slog.Logger
}

func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- subsDesc
	ch <- oldestDesc
	ch <- stallDesc
}

// gaugesSQL reads the subscription counts by status, the age of the oldest
// pending delivery of an active subscription (a resent one counts from its
// resend) and the longest stall, in one statement. Each active subscription
// costs two index probes: its head (lowest pending seq; a round writes its
// deliveries in seq order, so the head is also the oldest) and its first
// due delivery (a retry or a resend by its next attempt, a new one by its
// creation). The backlog behind a failing receiver is never read. A
// subscription's claim (lease_until) is live while a sender sends, and while
// an ordered sender waits for its head's retry (the claim runs to the
// retry's time plus an attempt). An unordered sender lets go of the claim
// when every pending delivery waits for its retry, and a job comes back at
// the first one's time. So a subscription stalls only when a delivery is
// due and no claim is live, counted from the later of the due time and the
// claim's end.
const gaugesSQL = `
WITH heads AS (
    SELECT h.created_at, n.due, s.lease_until
    FROM webhook_subscriptions s
    CROSS JOIN LATERAL (
        SELECT greatest(d.created_at, d.resent_at) AS created_at FROM webhook_deliveries d
        WHERE d.subscription_id = s.id AND d.status = 'pending'
        ORDER BY d.event_seq LIMIT 1) h
    CROSS JOIN LATERAL (
        SELECT coalesce(d.next_attempt_at, d.created_at) AS due FROM webhook_deliveries d
        WHERE d.subscription_id = s.id AND d.status = 'pending'
        ORDER BY coalesce(d.next_attempt_at, d.created_at) LIMIT 1) n
    WHERE s.status = 'active'
)
SELECT (SELECT coalesce(jsonb_object_agg(st, n), '{}')
        FROM (SELECT CASE WHEN status = 'active' THEN 'active' ELSE 'disabled_' || disabled_cause END AS st, count(*) AS n
              FROM webhook_subscriptions GROUP BY 1) c),
       greatest(coalesce(extract(epoch FROM now() - min(created_at)), 0), 0)::float8,
       greatest(coalesce(extract(epoch FROM now() - min(greatest(due, lease_until))
                                 FILTER (WHERE due <= now() AND (lease_until IS NULL OR lease_until <= now()))), 0), 0)::float8
FROM heads`

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var counts map[string]int64
	var oldest, stall float64
	err := c.pool.QueryRow(ctx, gaugesSQL).Scan(&counts, &oldest, &stall)
	if err == nil {
		err = c.durable.Durable(ctx)
	}
	if err != nil {
		c.logger.Warn("webhook metrics: read the gauges", slog.Any("error", err))
		return
	}
	for _, s := range subscriptionStatuses {
		ch <- prometheus.MustNewConstMetric(subsDesc, prometheus.GaugeValue, float64(counts[s]), s)
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, oldest)
	ch <- prometheus.MustNewConstMetric(stallDesc, prometheus.GaugeValue, stall)
}
