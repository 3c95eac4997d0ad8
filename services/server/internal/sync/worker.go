package sync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	gosync "sync"
	"time"

	"github.com/bothy/bothy/services/server/internal/sleep"
)

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// PollInterval wakes every consumer even without a notification
	// (consumer.poll_interval). Default 1s.
	PollInterval time.Duration
	// Cooldown is the least time from the start of a consumer's round to
	// the start of a round a notification wakes (consumer.round_cooldown):
	// one that comes sooner waits for the rest of it, and the wake-ups that
	// arrive meanwhile merge into its round. A steady trickle is then read
	// a few events per round instead of one round per event. Rounds that
	// read a full batch, and those of the poll interval, do not wait.
	// Default 0: none.
	Cooldown time.Duration
	// ErrorBackoff is the first wait after a failed round; it doubles up to
	// PollInterval. Wake-ups do not end it early. Default 50ms.
	ErrorBackoff time.Duration
	// RoundTimeout bounds one round, so shutdown never hangs on a query.
	// A round that runs out of it is tried again with half the events
	// (batchSizer). Default 30s.
	RoundTimeout time.Duration
	// Logger. Default: slog.Default().
	Logger *slog.Logger
	// Metrics, if set, counts rounds.
	Metrics *Metrics
	// AfterRound, if set, is called after every round (tests synchronize on it).
	AfterRound func(consumer string, res RoundResult, err error)
}

// Worker runs the rounds of every registered consumer, one goroutine each.
// Several workers, in one process or many, may run the same consumers: the
// cursor lock lets one round at a time through and the others end at once.
type Worker struct {
	rounds    *RoundRunner
	consumers []Consumer
	cfg       WorkerConfig

	mu    gosync.Mutex
	wakes []chan struct{}
}

// NewWorker creates a worker for consumers. Names must be unique.
func NewWorker(rounds *RoundRunner, consumers []Consumer, cfg *WorkerConfig) (*Worker, error) {
	c := WorkerConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.ErrorBackoff = cmp.Or(c.ErrorBackoff, 50*time.Millisecond)
	c.RoundTimeout = cmp.Or(c.RoundTimeout, 30*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	seen := map[string]bool{}
	for _, con := range consumers {
		if seen[con.Name()] {
			return nil, fmt.Errorf("consumer %q registered twice", con.Name())
		}
		seen[con.Name()] = true
		if c.Metrics != nil {
			c.Metrics.init(con.Name(), rounds.cfg.BatchSize)
		}
	}
	w := &Worker{rounds: rounds, consumers: consumers, cfg: c}
	for range consumers {
		w.wakes = append(w.wakes, make(chan struct{}, 1))
	}
	return w, nil
}

// Wake asks every consumer to run a round soon. It never blocks; wake-ups
// that arrive while one is pending merge into it, and a consumer whose last
// round failed waits out its backoff first. The LISTEN connection calls it
// on every notification and after every reconnect.
func (w *Worker) Wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.wakes {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Run runs until ctx is cancelled, then waits for the rounds in flight to
// finish or roll back and returns nil.
func (w *Worker) Run(ctx context.Context) error {
	var wg gosync.WaitGroup
	for i, c := range w.consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx, c, w.wakes[i])
		}()
	}
	wg.Wait()
	return nil
}

func (w *Worker) loop(ctx context.Context, c Consumer, wake <-chan struct{}) {
	name := c.Name()
	batch := newBatchSizer(w.rounds.cfg.BatchSize, 10*w.cfg.RoundTimeout)
	backoff := time.Duration(0)
	timer := time.NewTimer(0) // first round at once
	defer timer.Stop()
	var started time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
			if backoff > 0 {
				// The last round failed and its backoff runs on timer: a
				// notification must not cut it short, or a poison event
				// retries (and logs) at the rate events arrive. The round
				// the timer starts reads whatever woke us.
				continue
			}
			if sleep.For(ctx, time.Until(started.Add(w.cooldown(c)))) != nil {
				return
			}
			select {
			case <-wake: // came during the cooldown: the round reads what it announced
			default:
			}
		case <-timer.C:
		}
		for {
			started = time.Now()
			res, err := w.runOnce(ctx, c, batch)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				backoff = min(cmp.Or(backoff*2, w.cfg.ErrorBackoff), w.cfg.PollInterval)
				w.cfg.Logger.ErrorContext(ctx, "consumer round failed", slog.String("consumer", name),
					slog.Int("batch", batch.size), slog.Duration("retry_in", backoff), slog.Any("error", err))
				resetTimer(timer, backoff)
				break
			}
			backoff = 0
			if res.Full {
				continue // drain: more events are waiting
			}
			resetTimer(timer, w.cfg.PollInterval)
			break
		}
	}
}

// cooldown is the least time from the start of c's last round to a
// notified round: the worker's cooldown, or c's pace (ConsumerPacer) up to
// the poll interval.
func (w *Worker) cooldown(c Consumer) time.Duration {
	if p, ok := c.(ConsumerPacer); ok {
		return max(w.cfg.Cooldown, min(p.Pace(), w.cfg.PollInterval))
	}
	return w.cfg.Cooldown
}

// runOnce runs one round of at most batch.size events within RoundTimeout
// and lets batch learn from how it went.
func (w *Worker) runOnce(ctx context.Context, c Consumer, batch *batchSizer) (RoundResult, error) {
	rctx, cancel := context.WithTimeout(ctx, w.cfg.RoundTimeout)
	defer cancel()
	start := time.Now()
	res, err := w.rounds.run(rctx, c, batch.size)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return RoundResult{}, ctx.Err() // shutting down: the round rolled back, nothing to report
	}
	took, timedOut := time.Since(start), err != nil && isTimeout(err)
	switch {
	case timedOut:
		batch.timedOut(res.Read, start)
	case err == nil && !res.Locked:
		batch.succeeded(took, w.cfg.RoundTimeout, start)
	}
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.observe(c.Name(), &roundOutcome{res: res, seconds: took.Seconds(), err: err, timedOut: timedOut, batch: batch.size})
	}
	if w.cfg.AfterRound != nil {
		w.cfg.AfterRound(c.Name(), res, err)
	}
	return res, err
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(d)
}
