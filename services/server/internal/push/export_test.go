package push

// PendingRetryAfters is how many Retry-After answers wait for NextRetry.
func (w *DeliverWorker) PendingRetryAfters() int {
	w.retryMu.Lock()
	defer w.retryMu.Unlock()
	return len(w.retryMu.at)
}
