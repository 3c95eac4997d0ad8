package postgres

import (
	"context"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// flusher makes producers' asynchronous commits durable in groups: one
// flush transaction at a time, each releasing every producer that committed
// before it began. Producers that commit while a flush is in flight wait
// for the next one. Sharing saves each producer a transaction of its own
// (an xid, a commit record and a round trip) where PostgreSQL would have
// merged the fsyncs anyway.
type flusher struct {
	pool *pgxpool.Pool

	mu      gosync.Mutex
	waiting []chan error
	running bool
	wg      gosync.WaitGroup
}

func newFlusher(pool *pgxpool.Pool) *flusher { return &flusher{pool: pool} }

// flush returns once a flush that began after the call has committed, or
// ctx ends.
func (f *flusher) flush(ctx context.Context) error {
	done := make(chan error, 1)
	f.mu.Lock()
	f.waiting = append(f.waiting, done)
	if !f.running {
		f.running = true
		f.wg.Add(1)
		go f.run()
	}
	f.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *flusher) run() {
	defer f.wg.Done()
	for {
		f.mu.Lock()
		group := f.waiting
		f.waiting = nil
		if len(group) == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := f.pool.Exec(ctx, flushSQL)
		cancel()
		for _, done := range group {
			done <- err
		}
	}
}

// wait blocks until no flush is in flight.
func (f *flusher) wait() { f.wg.Wait() }
