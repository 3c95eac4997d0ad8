package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/pgformation"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testsweep"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// TestFailover_PrimaryLostUnderLoad runs bothy on a highly available
// PostgreSQL: a pg_auto_failover formation (monitor, primary, synchronous
// standby) from the local binaries, one api and two worker processes of
// this module's binary on the formation's multi-host URL, producers
// appending through the HTTP API, an ordered and an unordered webhook
// subscription and two push devices. Then the primary is lost twice, as
// when its machine dies (its keeper and PostgreSQL SIGKILLed), the second
// time after the first one rejoined as the standby; just before each loss
// the standby's WAL receiver is paused, so the standby is behind when the
// primary dies.
//
// It checks that every acknowledged event is in the log at its seq, the
// log is gapless, the roles export the synchronous standby (1, and 0
// while the new primary runs alone), every acknowledged event reached every receiver (in seq
// order for the ordered subscription) and every delivered event is in the
// log as delivered, repeats only of sends made while a loss was under way,
// no 500 answer, and no process exited. It reports the outage as the
// producers and the receivers saw it.
func TestFailover_PrimaryLostUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary on a PostgreSQL formation")
	}
	tooltest.Need(t, tooltest.Autoctl)
	t.Parallel()
	fo := setupFailover(t)
	fo.waitStandbys(t, 1)
	fo.startLoad()
	fo.waitTraffic(t, time.Time{})
	for n := 1; n <= 2; n++ {
		fo.loseThePrimary(t, n)
	}
	fo.finishLoad(t)
	fo.verify(t)
	fo.report(t)
	for _, p := range fo.procs {
		require.False(t, p.exited(), "a bothy process exited during the run:\n%s", p.logText())
		p.stop(t)
	}
}

// failover is the test's world: the formation, the processes, the load and
// what every loss looked like.
type failover struct {
	t       *testing.T
	f       *pgformation.Formation
	url     string
	procs   []*proc
	apiAddr string
	token   string
	hooks   *hookReceiver
	devices *pushDevices
	acks    *ackLog
	losses  []*loss
	load    *loadRun
}

const (
	foSpace = "ha"
	// foWebhooks are the subscriptions' receiver paths, named for their
	// policy.
	foOrdered, foUnordered = "ordered", "unordered"
)

var foDevices = []string{"phone", "laptop"}

func setupFailover(t *testing.T) *failover {
	ctx := context.Background()
	bin := buildBinary(t)
	// Not t.TempDir: its parents are private to root, and the formation
	// runs as the postgres user. Owned (testsweep): a later run stops and
	// removes the formation if this one is killed before its cleanup.
	dir, err := testsweep.MkdirTemp("bothy-ha-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	f, err := pgformation.New(ctx, &pgformation.Config{Dir: dir, FastFailover: true})
	require.NoError(t, err)
	t.Cleanup(func() { f.Close(context.Background()) })
	fo := &failover{t: t, f: f, hooks: newHookReceiver(t), acks: &ackLog{ids: map[string]int64{}}}
	fo.url, err = f.URL(ctx)
	require.NoError(t, err)
	t.Logf("formation %s: %s", dir, fo.url)

	cfg, err := config.Load("", nil, map[string]string{"database.url": fo.url})
	require.NoError(t, err)
	require.NoError(t, app.Migrate(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))))
	pool, err := app.OpenPool(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	vapid, err := push.GenerateVAPIDKeys()
	require.NoError(t, err)
	fo.devices = newPushDevices(t, vapid.Public)
	fo.seed(ctx, pool)

	env := []string{"BOTHY_DATABASE_URL=" + fo.url, "BOTHY_DATABASE_MAX_CONNS=8", "BOTHY_SERVER_LISTEN_ADDR=127.0.0.1:0",
		"BOTHY_WEBHOOKS_ALLOW_PRIVATE_TARGETS=true", "BOTHY_PUSH_ALLOW_PRIVATE_TARGETS=true",
		"BOTHY_PUSH_VAPID_PUBLIC_KEY=" + vapid.Public, "BOTHY_PUSH_VAPID_PRIVATE_KEY=" + vapid.Private}
	api := startProcess(t, bin, env, "server", "--role=api")
	fo.procs = []*proc{api, startProcess(t, bin, env, "server", "--role=worker"), startProcess(t, bin, env, "server", "--role=worker")}
	for _, p := range fo.procs {
		addr := p.waitAddr(t)
		if p == api {
			fo.apiAddr = addr
		}
	}
	return fo
}

// seed creates the producers' principal and token, the webhook
// subscriptions and the push devices.
func (fo *failover) seed(ctx context.Context, pool *pgxpool.Pool) {
	t := fo.t
	for p, kind := range map[string]authz.PrincipalKind{"writer": authz.KindApp, "owner": authz.KindUser, "reader": authz.KindUser} {
		require.NoError(t, authz.CreatePrincipal(ctx, pool, p, kind))
	}
	for p, right := range map[string]authz.Right{"writer": authz.RightWrite, "owner": authz.RightAdmin, "reader": authz.RightRead} {
		require.NoError(t, authz.Grant(ctx, pool, &authz.GrantParams{Space: foSpace, Principal: p, Right: right}))
	}
	var err error
	_, fo.token, err = authz.CreateToken(ctx, pool, &authz.CreateTokenParams{Principal: "writer", Scopes: []string{authz.ScopeEventsWrite}})
	require.NoError(t, err)
	unordered := webhooks.PolicyUnordered
	for _, h := range []struct {
		name   string
		policy *webhooks.PolicyParams
	}{{foOrdered, nil}, {foUnordered, &webhooks.PolicyParams{Name: &unordered}}} {
		_, _, err := webhooks.Create(ctx, pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "owner", Space: foSpace,
			URL: fo.hooks.url(h.name), AllowPrivateTargets: true, Policy: h.policy})
		require.NoError(t, err)
	}
	reg := push.NewRegistry(&push.RegistryConfig{AllowPrivateTargets: true})
	for _, name := range foDevices {
		var s push.Subscription
		s.Endpoint, s.Keys.P256dh, s.Keys.Auth = fo.devices.add(t, name)
		_, err := reg.Register(ctx, pool, &push.RegisterParams{Principal: "reader", Subscription: s})
		require.NoError(t, err)
	}
}

// loss is one loss of the primary and what followed.
type loss struct {
	n                int
	primary, standby string
	// paused: the standby's WAL receiver stopped; held: what showed that
	// commits went on meanwhile (waiting for the standby, or a 2xx);
	// killed: the primary lost; promoted: the standby took read-write
	// sessions; rejoined: the old primary was a standby again.
	paused, killed, promoted, rejoined time.Time
	held                               string
}

// loseThePrimary loses the current primary as when its machine dies, with
// the standby behind, waits for the standby to be promoted and for the
// producers and every receiver to get through again, then brings the old
// primary back as the standby.
func (fo *failover) loseThePrimary(t *testing.T, n int) {
	ctx := context.Background()
	primary, err := fo.f.Primary(ctx)
	require.NoError(t, err)
	standby := fo.other(primary)
	l := &loss{n: n, primary: primary.Name(), standby: standby.Name()}
	fo.losses = append(fo.losses, l)

	walReceiver := walReceiverPID(t, standby)
	require.NoError(t, syscall.Kill(walReceiver, syscall.SIGSTOP))
	l.paused = time.Now()
	l.held = fo.waitHeld(t, primary, l.paused)
	l.killed = time.Now()
	require.NoError(t, primary.Kill(ctx))
	loseInFlightWAL(t, walReceiver)
	l.promoted, err = standby.WaitWritable(ctx, 2*time.Minute)
	require.NoError(t, err)
	fo.waitTraffic(t, l.promoted)
	// The new primary has no standby until the old one is back.
	fo.waitStandbys(t, 0)

	require.NoError(t, primary.Rejoin())
	require.NoError(t, fo.f.Wait(ctx))
	l.rejoined = time.Now()
	fo.waitStandbys(t, 1)
}

func (fo *failover) other(n *pgformation.Node) *pgformation.Node {
	for _, o := range fo.f.Nodes() {
		if o != n {
			return o
		}
	}
	fo.t.Fatal("no second node")
	return nil
}

// loseInFlightWAL ends the standby's paused WAL receiver before it reads
// what the primary sent it during the pause: over a network, WAL in flight
// dies with the primary's machine, while on one machine it would wait in
// the receiver's socket. PostgreSQL starts another receiver; the node
// keeps what it had written before the pause.
func loseInFlightWAL(t *testing.T, walReceiver int) {
	require.NoError(t, syscall.Kill(walReceiver, syscall.SIGTERM))
	require.NoError(t, syscall.Kill(walReceiver, syscall.SIGCONT))
}

// walReceiverPID is the process ID of the standby's WAL receiver.
func walReceiverPID(t *testing.T, standby *pgformation.Node) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, standby.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var pid int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pid FROM pg_stat_wal_receiver`).Scan(&pid))
	return pid
}

// waitHeld waits, at most a minute, until a commit on the primary waits for
// the paused standby (its backend's wait event is SyncRep), or a request
// sent after the pause began was answered 2xx (which only an asynchronous
// standby allows: its events are on the primary alone), and says which.
func (fo *failover) waitHeld(t *testing.T, primary *pgformation.Node, since time.Time) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, primary.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	for {
		var waiting int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&waiting)
		require.NoError(t, err, "no commit waited for the standby, and no producer was answered 2xx, within a minute of the pause")
		if waiting > 0 {
			return fmt.Sprintf("%d commits waiting for the standby", waiting)
		}
		if at, ok := fo.acks.firstAckSentAfter(since); ok {
			return fmt.Sprintf("a request sent during the pause answered 2xx %s into it", at.Sub(since).Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitTraffic waits, at most 2 minutes, until after since a producer was
// answered 2xx and every webhook receiver and push device got a message.
func (fo *failover) waitTraffic(t *testing.T, since time.Time) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		missing := fo.silentSince(since)
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outage did not end: nothing since %s for %s", since.Format("15:04:05.000"), strings.Join(missing, ", "))
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
}

// waitStandbys waits, at most 2 minutes, until the api process exports
// bothy_database_synchronous_standbys with the value want.
func (fo *failover) waitStandbys(t *testing.T, want int) {
	line := fmt.Sprintf("bothy_database_synchronous_standbys %d", want)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := scrape(t, fo.apiAddr, "bothy_database_synchronous_standbys ")
		if got == line {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the api exports %q, want %q", got, line)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition with a deadline
	}
}

// silentSince names the producers (as one) and receivers that got nothing
// after since.
func (fo *failover) silentSince(since time.Time) []string {
	var missing []string
	if _, ok := fo.acks.firstAckAfter(since); !ok {
		missing = append(missing, "producers")
	}
	for _, r := range fo.receivers() {
		if _, ok := r.firstAfter(since); !ok {
			missing = append(missing, r.name)
		}
	}
	return missing
}
