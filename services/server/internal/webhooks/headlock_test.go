package webhooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// pausingConsumer holds a round inside Handle, after it has read its
// events and while it holds the cursor, until released.
type pausingConsumer struct {
	*webhooks.Consumer
	inHandle chan struct{}
	release  chan struct{}
}

func (c *pausingConsumer) Handle(ctx context.Context, tx pgx.Tx, events []sync.Event) ([]sync.Job, error) {
	close(c.inHandle)
	<-c.release
	return c.Consumer.Handle(ctx, tx, events)
}

// TestCreate_WaitsForTheRoundInFlight shows the ordering that keeps a new
// subscription from missing an event: while a webhooks round
// holds its cursor, creating a subscription waits, and it then starts at or
// after everything that round consumed. Without the cursor lock the create
// returns at once, and a round that matched events against a snapshot
// without the subscription could move past an event the subscription
// should get.
func TestCreate_WaitsForTheRoundInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	rv := newReceiver(t, nil)
	b.emit(t, "s1", 3)

	c := &pausingConsumer{Consumer: webhooks.NewConsumer(nil), inHandle: make(chan struct{}), release: make(chan struct{})}
	released := false
	t.Cleanup(func() { // let a failed test's round finish, so the pool can close
		if !released {
			close(c.release)
		}
	})
	roundDone := make(chan sync.RoundResult, 1)
	go func() {
		res, err := b.rounds.Run(ctx, c)
		require.NoError(t, err)
		roundDone <- res
	}()
	<-c.inHandle

	created := make(chan *webhooks.Subscription, 1)
	go func() {
		s, _, err := webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1", URL: rv.url(), AllowPrivateTargets: true})
		require.NoError(t, err)
		created <- s
	}()
	// The create waits on the cursor row lock the round holds.
	testwait.Until(t, 10*time.Second, func() bool {
		var waiting bool
		require.NoError(t, b.db.Pool.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			               WHERE datname = current_database() AND wait_event_type = 'Lock'
			                 AND query LIKE '%event_consumer_cursors%FOR UPDATE%')`).Scan(&waiting))
		return waiting
	}, "subscription creation did not wait for the round holding the cursor")
	select {
	case <-created:
		t.Fatal("subscription was created while a round held the cursor")
	default:
	}

	released = true
	close(c.release)
	res := <-roundDone
	s := <-created
	require.GreaterOrEqual(t, s.ResumeAfterSeq, res.To, "the subscription starts after what the round consumed")
}
