package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

// TestWorkers_TakeOverWhenEveryWorkerIsKilled: two real worker processes,
// and an api process beside them as in a deployment; the sender of an
// ordered subscription hangs in its request when every worker process is
// SIGKILLed, and one worker is started again a second later. That worker
// must take the subscription over (its lease holds for a minute and a
// half) and deliver the event that was in flight, then the next. It logs
// how long after the kill the next request arrived; the figure is for the
// ADR, not an assertion.
func TestWorkers_TakeOverWhenEveryWorkerIsKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	db := dbtest.NewDB(t)
	ctx := context.Background()
	require.NoError(t, authz.CreatePrincipal(ctx, db.Pool, "alice", authz.KindUser))
	require.NoError(t, authz.Grant(ctx, db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightRead}))

	hung := make(chan struct{})
	url, recv := recvtest.Endpoint(t, func(a *webhookstest.Arrival) webhookstest.Answer {
		if a.N == 1 { // the request of a process that is killed never ends
			close(hung)
			return webhookstest.Answer{Hang: true}
		}
		return webhookstest.Answer{Status: http.StatusNoContent}
	})
	_, _, err := webhooks.Create(ctx, db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1",
		URL: url, AllowPrivateTargets: true})
	require.NoError(t, err)

	env := []string{"BOTHY_DATABASE_URL=" + db.URL, "BOTHY_SERVER_LISTEN_ADDR=127.0.0.1:0",
		"BOTHY_WEBHOOKS_ALLOW_PRIVATE_TARGETS=true", "BOTHY_WEBHOOKS_TIMEOUT=60s"}
	startProcess(t, bin, env, "server", "--role=api").waitAddr(t)
	apiUp := time.Now()
	workers := []*proc{startProcess(t, bin, env, "server", "--role=worker"), startProcess(t, bin, env, "server", "--role=worker")}
	for _, w := range workers {
		w.waitAddr(t)
	}
	log := postgres.NewEventLog(db.Pool, nil)
	defer log.Close()
	emit := func() int64 {
		evs, err := log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
			return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "bob"}}, nil
		})
		require.NoError(t, err)
		return evs[0].Seq
	}
	first := emit()
	select {
	case <-hung:
	case <-time.After(60 * time.Second):
		t.Fatal("no worker sent the first event")
	}
	second := emit()
	// The api process has run for longer than liveness's settle interval:
	// its sessions show the restarted worker that the database did not
	// restart a moment ago, so free locks mean dead processes.
	require.Eventually(t, func() bool { return time.Since(apiUp) > liveness.Settle }, 10*time.Second, 10*time.Millisecond)

	for _, w := range workers {
		require.NoError(t, w.cmd.Process.Kill())
	}
	killed := time.Now()
	for _, w := range workers {
		<-w.done
	}
	require.Eventually(t, func() bool { return time.Since(killed) >= time.Second }, 5*time.Second, 10*time.Millisecond, "a second has passed")
	startProcess(t, bin, env, "server", "--role=worker").waitAddr(t)

	// The hung request is never answered: the answered ones are the
	// restarted worker's.
	answered := func() []webhookstest.Arrival {
		var out []webhookstest.Arrival
		for _, a := range recv.Arrivals() {
			if a.OK() {
				out = append(out, a)
			}
		}
		return out
	}
	recvtest.Until(t, 90*time.Second, recv, func([]webhookstest.Arrival) bool { return len(answered()) >= 2 }, "the restarted worker delivers both events")
	got := answered()
	require.Equal(t, []int64{first, second}, webhookstest.Seqs(got[:2]), "the event in flight first, then the next")
	t.Logf("next request %s after every worker was killed (one started again after 1 s)", got[0].At.Sub(killed).Round(time.Millisecond))
}
