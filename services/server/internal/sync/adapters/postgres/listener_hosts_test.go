package postgres_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// TestListener_ListensPastAHostThatStoppedAnswering: on a failover
// formation's URL whose first host stopped answering without refusing
// anything (a lost primary's machine), the listener gives up on that host
// after dbconn.ConnectTimeout and listens on the next, within its own
// attempt's 10 s.
func TestListener_ListensPastAHostThatStoppedAnswering(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	lost := dbtest.NewFrozenProxy(t, dbtest.HostPort(t, db.URL))
	lost.Freeze()
	listening := make(chan uint32, 1)
	l := postgres.NewListener(func() {}, &postgres.ListenerConfig{ConnString: dbtest.WithHosts(t, db.URL, lost.Addr()+","+dbtest.HostPort(t, db.URL)),
		Logger: slog.New(slog.DiscardHandler), OnConnect: func(pid uint32) {
			select {
			case listening <- pid:
			default:
			}
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case pid := <-listening:
		require.NotZero(t, pid)
	case <-time.After(time.Minute):
		t.Fatal("the listener did not listen within a minute")
	}
}
