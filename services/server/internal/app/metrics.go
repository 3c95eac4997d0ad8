package app

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bothy/bothy/services/server/internal/buildinfo"
	"github.com/bothy/bothy/services/server/internal/replication"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// registerMetrics registers the process's collectors: Go and process
// metrics, the consumer gauges and the synchronous standbys read from the
// database, the configuration that alert rules compare with, the role and
// the build.
func (s *Server) registerMetrics(pool *pgxpool.Pool) {
	cfg, role := s.cfg, s.cfg.Server.Role
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.registry.MustRegister(postgres.NewLagCollector(pool, s.logger))
	s.registry.MustRegister(replication.NewCollector(pool, s.logger))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bothy_database_synchronous_standby_expected",
		Help: "1 if database.expect_synchronous_standby is set; BothyDatabaseNoSynchronousStandby fires only then.",
	}, func() float64 {
		if cfg.Database.ExpectSynchronousStandby {
			return 1
		}
		return 0
	}))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bothy_event_consumer_pending_alert_after_seconds",
		Help: "The configured consumer.pending_alert_after; BothyEventConsumerLag compares pending age with it.",
	}, func() float64 { return cfg.Consumer.PendingAlertAfter.Seconds() }))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bothy_event_retention_seconds",
		Help: "The configured sync.event_retention.",
	}, func() float64 { return cfg.Sync.EventRetention.Seconds() }))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bothy_event_consumer_poll_interval_seconds",
		Help: "The configured consumer.poll_interval: an idle consumer still makes a round this often.",
	}, func() float64 { return cfg.Consumer.PollInterval.Seconds() }))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bothy_event_consumer_round_timeout_seconds",
		Help: "The configured consumer.round_timeout: the longest a round may take before it is rolled back.",
	}, func() float64 { return cfg.Consumer.RoundTimeout.Seconds() }))
	roleInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bothy_server_role", Help: "Role this process runs (always 1)."}, []string{"role"})
	roleInfo.WithLabelValues(role).Set(1)
	s.registry.MustRegister(roleInfo)
	s.registry.MustRegister(buildinfo.NewCollector(buildinfo.Read()))
}
