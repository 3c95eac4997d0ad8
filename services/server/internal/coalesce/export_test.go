package coalesce

// Queued returns the values of the calls no batch has taken yet.
func Queued[T any](b *Batcher[T]) []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	vs := make([]T, 0, len(b.queue))
	for _, c := range b.queue {
		vs = append(vs, c.v)
	}
	return vs
}
