package push

// PendingRetryAfters is how many Retry-After answers wait for NextRetry.
func (w *DeliverWorker) PendingRetryAfters() int {
	w.retryMu.Lock()
	defer w.retryMu.Unlock()
	return len(w.retryMu.at)
}

// SetSlotWait makes the worker call f whenever a send waits for a free slot
// of its origin.
func (w *DeliverWorker) SetSlotWait(f func()) { w.slotWait = f }
