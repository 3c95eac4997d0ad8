package postgres

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// NewEventLogVariant returns an EventLog using the designs that benchmarks
// compare the production path with.
func NewEventLogVariant(pool *pgxpool.Pool, cfg *EventLogConfig, advisoryLock, flushInLock, notifyInTx bool) *EventLog {
	l := NewEventLog(pool, cfg)
	l.variant = variant{advisoryLock: advisoryLock, flushInLock: flushInLock, notifyInTx: notifyInTx}
	return l
}

// WrapFlush makes each flush that l's Writes and Durable calls share a call
// of what wrap returns, given the flush it replaces. Call it before l is
// used.
func WrapFlush(l *EventLog, wrap func(flush sync.DurabilityBarrier) sync.DurabilityBarrier) {
	l.flushes = sync.NewSharedBarrier(wrap(poolBarrier{l.pool}), nil)
}
