// Package postgres implements the ports of package sync with pgx and River:
// the producer side of the event log, the cursor store, the event source,
// the job sink, the LISTEN connection that wakes workers, the retention
// maintenance and the lag gauges every role exports.
package postgres
