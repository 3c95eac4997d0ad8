package sync_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	gosync "sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// TestMain fails the package if a worker goroutine outlives its test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// poison is a consumer whose Handle always fails, as with an event it
// cannot process. It reuses the webhooks consumer's cursor row.
type poison struct{}

func (poison) Name() string { return "webhooks" }

func (poison) Handle(context.Context, pgx.Tx, []sync.Event) ([]sync.Job, error) {
	return nil, errors.New("poison event")
}

// noJobs is a JobSink for rounds that never get as far as inserting.
type noJobs struct{}

func (noJobs) InsertJobs(context.Context, pgx.Tx, []sync.Job) (int, error) { return 0, nil }

func TestWorker_Run(t *testing.T) {
	t.Parallel()

	t.Run("WakeUpsDoNotCutAnErrorBackoffShort", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		log := postgres.NewEventLog(db.Pool, nil)
		t.Cleanup(log.Close)
		_, err := log.Write(context.Background(), func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
			return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "bob"}}, nil
		})
		require.NoError(t, err)

		var mu gosync.Mutex
		var rounds []error
		rr := sync.NewRoundRunner(db.Pool, postgres.CursorStore{}, log, noJobs{}, &sync.RoundConfig{Logger: quiet})
		// Backoffs 100, 200, 400, 800 ms, then the poll interval: rounds
		// start at about 0, 0.1, 0.3, 0.7 and 1.5 s of the 2 s window.
		w, err := sync.NewWorker(rr, []sync.Consumer{poison{}}, &sync.WorkerConfig{
			PollInterval: time.Second, ErrorBackoff: 100 * time.Millisecond, Logger: quiet,
			AfterRound: func(_ string, _ sync.RoundResult, err error) {
				mu.Lock()
				rounds = append(rounds, err)
				mu.Unlock()
			},
		})
		require.NoError(t, err)

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		// A flood of notifications, as a busy log sends them.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
	flood:
		for {
			select {
			case <-ctx.Done():
				break flood
			case <-tick.C:
				w.Wake()
			}
		}
		require.NoError(t, <-done)

		mu.Lock()
		defer mu.Unlock()
		for _, err := range rounds {
			if !errors.Is(err, context.DeadlineExceeded) { // the window's end may cut the last round
				require.ErrorContains(t, err, "poison event")
			}
		}
		// Five expected; a slow machine makes fewer, never more. Without
		// the backoff holding, every wake-up starts a round: hundreds.
		t.Logf("%d rounds", len(rounds))
		require.LessOrEqual(t, len(rounds), 7, "rounds in 2 s with a failing consumer and a wake-up every millisecond")
		require.GreaterOrEqual(t, len(rounds), 2, "the backoff delays retries, it does not stop them")
	})
}
