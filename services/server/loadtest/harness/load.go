package harness

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	gosync "sync"
	"time"
)

// LoadParams is an open-loop schedule.
type LoadParams struct {
	// Rate is calls per second; Duration how long the schedule runs.
	Rate     float64
	Duration time.Duration
	// Producers is how many goroutines make the calls.
	Producers int
}

// OpenLoop calls write(ctx, i) for i = 0 .. Rate*Duration-1 on Producers
// goroutines, open loop: call i is due at start + i/Rate whatever happened
// to the ones before, so a slow producer shows up as backlog instead of as
// a lower offered rate. It returns what the successful calls returned, in
// the order they returned, and the first error of a call, or ctx's.
func OpenLoop[T any](ctx context.Context, p *LoadParams, write func(ctx context.Context, i int) (T, error)) ([]T, error) {
	n := int(p.Duration.Seconds() * p.Rate)
	due := make(chan int, n)
	var (
		wg       gosync.WaitGroup
		mu       gosync.Mutex
		written  []T
		firstErr error
	)
	for range max(p.Producers, 1) {
		wg.Go(func() {
			for i := range due {
				v, err := write(ctx, i)
				mu.Lock()
				if err != nil {
					firstErr = cmpErr(firstErr, err)
				} else {
					written = append(written, v)
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	interval := time.Duration(float64(time.Second) / p.Rate)
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
		if ctx.Err() != nil {
			break
		}
		due <- i
	}
	close(due)
	wg.Wait()
	return written, cmpErr(firstErr, ctx.Err())
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// ParseRate reads a rate flag such as "500/s" (the "/s" is optional) and
// checks it is in (0, most].
func ParseRate(s string, most float64) (float64, error) {
	r, err := strconv.ParseFloat(strings.TrimSuffix(s, "/s"), 64)
	if err != nil || r <= 0 || r > most {
		return 0, fmt.Errorf("--rate %q: want events per second such as 500/s, at most %g", s, most)
	}
	return r, nil
}
