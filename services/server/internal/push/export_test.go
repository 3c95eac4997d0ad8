package push

import "github.com/jackc/pgx/v5/pgxpool"

// PendingRetryAfters is how many Retry-After answers wait for NextRetry.
func (w *DeliverWorker) PendingRetryAfters() int {
	w.retryMu.Lock()
	defer w.retryMu.Unlock()
	return len(w.retryMu.at)
}

// SetSlotWait makes the worker call f whenever a send waits for a free slot
// of its origin.
func (w *DeliverWorker) SetSlotWait(f func()) { w.slotWait = f }

// SendLogPool is the pool the module's send log writes with, and whether
// its worker writes there.
func (m *Module) SendLogPool() (*pgxpool.Pool, bool) {
	return m.records, m.worker != nil && m.worker.cfg.Records == m.records
}

// RecordSendsSQL is the send log's statement.
const RecordSendsSQL = recordSendsSQL
