package sync_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
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
	goleak.VerifyTestMain(dbtest.Background(m))
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

		// Backoffs 100, 200, 400, 800 ms, then the poll interval: each
		// round ends at least its backoff after the one before, however
		// many wake-ups come meanwhile (a busy machine only stretches the
		// gaps). Without the backoff holding, every wake-up starts a round.
		backoffs := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
		type round struct {
			at  time.Time
			err error
		}
		rounds := make(chan round, 1000)
		rr := sync.NewRoundRunner(db.Pool, postgres.CursorStore{}, log, noJobs{}, &sync.RoundConfig{Logger: quiet})
		w, err := sync.NewWorker(rr, []sync.Consumer{poison{}}, &sync.WorkerConfig{
			PollInterval: time.Second, ErrorBackoff: backoffs[0], Logger: quiet,
			AfterRound: func(_ string, _ sync.RoundResult, err error) {
				select {
				case rounds <- round{time.Now(), err}:
				default:
				}
			},
		})
		require.NoError(t, err)

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		// A flood of notifications, as a busy log sends them, until four
		// rounds have ended.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		deadline := time.After(time.Minute)
		var got []round
		for len(got) < len(backoffs)+1 {
			select {
			case r := <-rounds:
				got = append(got, r)
			case <-tick.C:
				w.Wake()
			case <-deadline:
				cancel()
				t.Fatalf("%d rounds in a minute: the backoff delays retries, it must not stop them", len(got))
			}
		}
		cancel()
		require.NoError(t, <-done)
		for i, r := range got {
			require.ErrorContains(t, r.err, "poison event")
			if i > 0 {
				require.GreaterOrEqual(t, r.at.Sub(got[i-1].at), backoffs[i-1], "round %d came before its backoff ran out", i+1)
			}
		}
	})
}

// idle is a consumer that handles every event without a job. It reuses
// the push consumer's cursor row.
type idle struct{}

func (idle) Name() string { return "push" }

func (idle) Handle(context.Context, pgx.Tx, []sync.Event) ([]sync.Job, error) { return nil, nil }

// TestWorker_WakeUpsWaitForTheCooldown: under a flood of notifications,
// rounds start at least the cooldown apart; the notifications that come
// meanwhile merge into the next round. Round i+2 ends at least a cooldown
// after round i ended, since round i+1 started after that and i+2 a
// cooldown after i+1. Without the cooldown every notification starts a
// round.
func TestWorker_WakeUpsWaitForTheCooldown(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	log := postgres.NewEventLog(db.Pool, nil)
	t.Cleanup(log.Close)
	const cooldown = 100 * time.Millisecond
	ends := make(chan time.Time, 1000)
	rr := sync.NewRoundRunner(db.Pool, postgres.CursorStore{}, log, noJobs{}, &sync.RoundConfig{Logger: quiet})
	w, err := sync.NewWorker(rr, []sync.Consumer{idle{}}, &sync.WorkerConfig{
		PollInterval: time.Hour, Cooldown: cooldown, Logger: quiet,
		AfterRound: func(_ string, _ sync.RoundResult, err error) {
			if err == nil {
				select {
				case ends <- time.Now():
				default:
				}
			}
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	var got []time.Time
	for len(got) < 6 {
		select {
		case at := <-ends:
			got = append(got, at)
		case <-tick.C:
			w.Wake()
		case <-deadline:
			cancel()
			t.Fatalf("%d rounds in a minute: the cooldown delays rounds, it must not stop them", len(got))
		}
	}
	cancel()
	require.NoError(t, <-done)
	for i := 2; i < len(got); i++ {
		require.GreaterOrEqual(t, got[i].Sub(got[i-2]), cooldown, "rounds %d and %d ended less than a cooldown apart", i-1, i+1)
	}
}

// paced is a consumer that asks for rounds at most every hour
// (sync.ConsumerPacer). It reuses the event_types consumer's cursor row.
type paced struct{}

func (paced) Name() string                                                     { return "event_types" }
func (paced) Handle(context.Context, pgx.Tx, []sync.Event) ([]sync.Job, error) { return nil, nil }
func (paced) Pace() time.Duration                                              { return time.Hour }

func TestWorker_APacedConsumerSkipsNotifiedRounds(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	log := postgres.NewEventLog(db.Pool, nil)
	t.Cleanup(log.Close)
	rounds := make(chan string, 1000)
	rr := sync.NewRoundRunner(db.Pool, postgres.CursorStore{}, log, noJobs{}, &sync.RoundConfig{Logger: quiet})
	w, err := sync.NewWorker(rr, []sync.Consumer{idle{}, paced{}}, &sync.WorkerConfig{
		PollInterval: time.Hour, Logger: quiet,
		AfterRound: func(name string, _ sync.RoundResult, err error) {
			if err == nil {
				rounds <- name
			}
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	// Both run their first round at start; then every wake-up starts a
	// round of the unpaced consumer and none of the paced one, which waits
	// for its pace (capped at the hour-long poll interval).
	count := map[string]int{}
	deadline := time.After(time.Minute)
	for count["push"] < 6 || count["event_types"] < 1 {
		select {
		case name := <-rounds:
			count[name]++
			w.Wake()
		case <-deadline:
			t.Fatalf("rounds in a minute: %v", count)
		}
	}
	require.Equal(t, 1, count["event_types"], "the paced consumer ran a round for a notification")
}

func TestListenWhileWatched(t *testing.T) {
	t.Parallel()
	bc := sync.NewSpaceBroadcast()
	started, stopped := make(chan struct{}, 10), make(chan struct{}, 10)
	listen := func(ctx context.Context) error {
		started <- struct{}{}
		<-ctx.Done()
		stopped <- struct{}{}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sync.ListenWhileWatched(ctx, bc, 10*time.Millisecond, listen) }()
	wait := func(ch chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatal(what)
		}
	}

	_, stop := bc.Watch("s1")
	wait(started, "the first reader starts the listening")
	_, stop2 := bc.Watch("s2")
	stop()
	stop2()
	wait(stopped, "the listening ends a linger after the last reader left")
	_, stop = bc.Watch("s1")
	wait(started, "a reader starts it again")
	cancel()
	wait(stopped, "the listening ends with the context")
	require.NoError(t, <-done)
	stop()
	require.Empty(t, started, "it listened once per time it was watched")
}
