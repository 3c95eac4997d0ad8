package webhooks

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Results counted by bothy_webhook_deliveries_total.
var deliveryResults = []string{"delivered", "retry", "dead", "gone", "gap"}

// Metrics are the in-process delivery metrics; the subscription and
// pending-age gauges are read from the database at scrape time, so every
// role exports them, not only the worker that sends.
type Metrics struct {
	deliveries *prometheus.CounterVec
	duration   prometheus.Histogram
}

// NewMetrics registers the webhook metrics on reg. The gauges read pool at
// every scrape.
func NewMetrics(reg prometheus.Registerer, pool *pgxpool.Pool, logger *slog.Logger) *Metrics {
	if logger == nil {
		logger = slog.Default()
	}
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bothy_webhook_deliveries_total",
			Help: "Delivery outcomes: delivered (2xx), retry (failed, will be retried), dead (refused by authz or retry budget exhausted), gone (410), gap (event left the log first).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bothy_webhook_attempt_duration_seconds",
			Help:    "Duration of delivery attempts, from sending the request to the end of the (capped) response body.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
	}
	for _, r := range deliveryResults {
		m.deliveries.WithLabelValues(r)
	}
	reg.MustRegister(m.deliveries, m.duration, &dbCollector{pool: pool, logger: logger})
	return m
}

func (m *Metrics) delivery(result string) {
	if m != nil {
		m.deliveries.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) attempt(d time.Duration) {
	if m != nil {
		m.duration.Observe(d.Seconds())
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
)

// dbCollector reads the gauges from the database at scrape time.
type dbCollector struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
}

func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- subsDesc
	ch <- oldestDesc
}

const statusCountSQL = `
SELECT CASE WHEN status = 'active' THEN 'active' ELSE 'disabled_' || disabled_cause END, count(*)
FROM webhook_subscriptions GROUP BY 1`

const oldestPendingSQL = `
SELECT coalesce(extract(epoch FROM now() - min(d.created_at)), 0)::float8
FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id AND s.status = 'active'
WHERE d.status = 'pending'`

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts := map[string]float64{}
	for _, s := range subscriptionStatuses {
		counts[s] = 0
	}
	rows, err := c.pool.Query(ctx, statusCountSQL)
	if err == nil {
		for rows.Next() {
			var s string
			var n int64
			if err = rows.Scan(&s, &n); err != nil {
				break
			}
			counts[s] = float64(n)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		c.logger.Warn("webhook metrics: count subscriptions", slog.Any("error", err))
		ch <- prometheus.NewInvalidMetric(subsDesc, err)
	} else {
		for s, n := range counts {
			ch <- prometheus.MustNewConstMetric(subsDesc, prometheus.GaugeValue, n, s)
		}
	}
	var age float64
	if err := c.pool.QueryRow(ctx, oldestPendingSQL).Scan(&age); err != nil {
		c.logger.Warn("webhook metrics: oldest pending delivery", slog.Any("error", err))
		ch <- prometheus.NewInvalidMetric(oldestDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age)
}
