package postgres_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbconn"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// notifyCounter counts the statements of their own that send NOTIFY.
type notifyCounter struct{ n atomic.Int64 }

func (c *notifyCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "pg_notify") {
		c.n.Add(1)
	}
	return ctx
}

func (*notifyCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestEventLog_AnAppendCarriesItsNotification: with no notification in
// flight, an append's flush transaction carries NOTIFY event_log, so the
// readers are woken without a transaction of the notification's own, and
// a listener still hears of the commit.
func TestEventLog_AnAppendCarriesItsNotification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	pc, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	counter := &notifyCounter{}
	pc.ConnConfig.Tracer = counter
	dbconn.RegisterTypes(pc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	listener, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = listener.Close(context.WithoutCancel(ctx)) })
	_, err = listener.Exec(ctx, `LISTEN `+postgres.Channel)
	require.NoError(t, err)

	log := postgres.NewEventLog(pool, nil)
	_, err = log.Append(ctx, []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "alice"}})
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = listener.WaitForNotification(wctx)
	require.NoError(t, err, "the listener heard of the commit")
	log.Close() // waits for a notification the notifier may still send
	require.Zero(t, counter.n.Load(), "no NOTIFY of its own was sent")
}
