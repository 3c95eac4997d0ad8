package postgres

import "github.com/jackc/pgx/v5/pgxpool"

// NewEventLogVariant returns an EventLog using the designs that benchmarks
// compare the production path with.
func NewEventLogVariant(pool *pgxpool.Pool, cfg *EventLogConfig, advisoryLock, flushInLock, notifyInTx bool) *EventLog {
	l := NewEventLog(pool, cfg)
	l.variant = variant{advisoryLock: advisoryLock, flushInLock: flushInLock, notifyInTx: notifyInTx}
	return l
}

// QueuedAppends is how many Append calls wait for a shared pipeline.
func (l *EventLog) QueuedAppends() int {
	return l.appends.Waiting()
}

// MaxAppendRunners is how many shared Append pipelines run at once.
const MaxAppendRunners = maxAppendRunners

// EventsAtSQL is EventsAt's statement.
const EventsAtSQL = eventsAtSQL

// EventsAfterSQL is EventsAfter's statement.
const EventsAfterSQL = eventsAfterSQL

// LoggedEventsSQL is the statement that finds the logged events of
// repeated ids.
const LoggedEventsSQL = loggedEventsSQL

// ChangedSpacesSQL is ChangedSpaces's statement.
const ChangedSpacesSQL = changedSpacesSQL
