package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	gosync "sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// ackedEvent is what a producer was told about its event.
type ackedEvent struct {
	seq  int64
	id   uuid.UUID
	typ  string
	data string
}

// TestCrashLosesNoAcknowledgedEvent appends events one at a time through
// the producer API and through POST /v1/spaces/{space}/events on a private
// cluster that keeps unflushed WAL in memory for up to 10 s, crashes
// PostgreSQL (immediate stop), restarts it, and requires every acknowledged
// event at its seq with its content, and the counter to continue after the
// highest acknowledged seq (no seq handed out twice). It does so once with
// PostgreSQL's defaults and once with the database's default
// synchronous_commit off, which the server's pools must override.
func TestCrashLosesNoAcknowledgedEvent(t *testing.T) {
	t.Run("ServerDefaults", func(t *testing.T) { testCrashLosesNothing(t, "") })
	t.Run("DatabaseDefaultSynchronousCommitOff", func(t *testing.T) { testCrashLosesNothing(t, "off") })
	t.Run("ConcurrentProducersCrashMidStream", testCrashMidStream)
}

// testCrashMidStream crashes PostgreSQL while 8 producers append, half
// through Write and half through Append, so flushes are in flight and
// producers wait on them at the moment of the crash; every event
// acknowledged before it must survive.
func testCrashMidStream(t *testing.T) {
	p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
	ctx := context.Background()
	pool := openPool(t, p.URL)
	producer := postgres.NewEventLog(pool, nil)
	var mu gosync.Mutex
	var acked []ackedEvent
	perType := map[string]int{} // acknowledged events by path
	enough, crashing := make(chan struct{}), false
	var wg gosync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				data := fmt.Sprintf(`{"g": %d, "i": %d}`, g, i)
				typ, viaAppend := "producer.wrote", g%2 == 1
				if viaAppend {
					typ = "producer.appended"
				}
				news := []sync.NewEvent{{Space: "crash", Type: typ, Actor: "test", Data: []byte(data)}}
				var evs []sync.Event
				var err error
				if viaAppend {
					evs, err = producer.Append(ctx, news)
				} else {
					evs, err = producer.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) { return news, nil })
				}
				if err != nil {
					return // the crash: not acknowledged
				}
				mu.Lock()
				acked = append(acked, ackedEvent{seq: evs[0].Seq, id: evs[0].ID, typ: typ, data: data})
				perType[typ]++
				if !crashing && perType["producer.wrote"] >= 100 && perType["producer.appended"] >= 100 {
					crashing = true
					close(enough)
				}
				mu.Unlock()
			}
		}()
	}
	<-enough
	p.CrashAndRestart(t)
	wg.Wait()
	producer.Close()
	pool.Close()
	mu.Lock()
	defer mu.Unlock()
	pool = openPool(t, p.URL)
	defer pool.Close()
	requireAcknowledgedPresent(t, pool, acked)
}

func testCrashLosesNothing(t *testing.T, dbSyncCommit string) {
	const perPath = 20
	p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
	ctx := context.Background()
	if dbSyncCommit != "" {
		conn, err := pgx.Connect(ctx, p.URL)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `ALTER DATABASE bothy SET synchronous_commit = `+dbSyncCommit)
		require.NoError(t, err)
		require.NoError(t, conn.Close(ctx))
	}
	pool := openPool(t, p.URL)
	defer func() { pool.Close() }()
	require.NoError(t, authz.CreatePrincipal(ctx, pool, "writer", authz.KindUser))
	require.NoError(t, authz.Grant(ctx, pool, &authz.GrantParams{Space: "crash", Principal: "writer", Right: authz.RightWrite}))
	_, token, err := authz.CreateToken(ctx, pool, &authz.CreateTokenParams{Principal: "writer", Scopes: []string{authz.ScopeEventsWrite}})
	require.NoError(t, err)
	b := &testBundle{base: startServer(t, p.URL, "api")}
	producer := postgres.NewEventLog(pool, nil)
	defer producer.Close()

	var acked []ackedEvent
	for i := range perPath {
		data := fmt.Sprintf(`{"i": %d}`, i)
		evs, err := producer.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
			return []sync.NewEvent{{Space: "crash", Type: "producer.wrote", Actor: "test", Data: []byte(data)}}, nil
		})
		require.NoError(t, err)
		acked = append(acked, ackedEvent{seq: evs[0].Seq, id: evs[0].ID, typ: "producer.wrote", data: data})

		res := b.do(t, "POST", "/v1/spaces/crash/events", token, fmt.Sprintf(`{"events":[{"type":"api.wrote","data":%s}]}`, data))
		require.Equal(t, http.StatusCreated, res.status, "body: %s", res.body)
		var out struct {
			Events []struct {
				Seq int64     `json:"seq"`
				ID  uuid.UUID `json:"id"`
			} `json:"events"`
		}
		require.NoError(t, json.Unmarshal(res.body, &out))
		acked = append(acked, ackedEvent{seq: out.Events[0].Seq, id: out.Events[0].ID, typ: "api.wrote", data: data})
	}

	pool.Close()
	p.CrashAndRestart(t)
	pool = openPool(t, p.URL)

	highest := requireAcknowledgedPresent(t, pool, acked)

	again := postgres.NewEventLog(pool, nil)
	defer again.Close()
	evs, err := again.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{{Space: "crash", Type: "after.crash", Actor: "test"}}, nil
	})
	require.NoError(t, err)
	require.Greater(t, evs[0].Seq, highest, "the counter handed out an acknowledged seq again")
}

// openPool opens a pool the way every bothy process does.
func openPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := config.Load("", nil, map[string]string{"database.url": url})
	require.NoError(t, err)
	pool, err := app.OpenPool(context.Background(), cfg)
	require.NoError(t, err)
	return pool
}

// TestReadsShowOnlyDurableState: a read of the API may see rows that a
// round or a producer committed asynchronously and that are not yet on
// disk. It must not answer with them before they are: here a delivery row
// committed asynchronously (as a round commits) is listed through GET
// /v1/webhooks/{id}/deliveries, PostgreSQL then crashes, and what the
// answer showed must still be there after recovery.
func TestReadsShowOnlyDurableState(t *testing.T) {
	p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
	ctx := context.Background()
	pool := p.Pool(t)
	require.NoError(t, authz.CreatePrincipal(ctx, pool, "owner", authz.KindUser))
	require.NoError(t, authz.Grant(ctx, pool, &authz.GrantParams{Space: "s1", Principal: "owner", Right: authz.RightAdmin}))
	_, token, err := authz.CreateToken(ctx, pool, &authz.CreateTokenParams{Principal: "owner",
		Scopes: []string{authz.ScopeWebhooksManage, authz.ScopeEventsWrite}})
	require.NoError(t, err)
	b := &testBundle{base: startServer(t, p.URL, "api")}
	res := b.do(t, "POST", "/v1/webhooks", token, `{"space":"s1","url":"http://127.0.0.1:9/hook"}`)
	require.Equal(t, http.StatusCreated, res.status, "body: %s", res.body)
	subID := res.json(t)["id"].(string)

	// Vacuum away the dead catalog rows the migrations left. A server
	// connection that reads such a catalog page to fill its caches prunes
	// it and writes a full-page image, which carries the commit below out
	// to the kernel, where an immediate stop cannot take it back; the
	// warm-up below does not reach every page a later request may read.
	_, err = pool.Exec(ctx, `VACUUM`)
	require.NoError(t, err)
	// Warm up the read path: its first run writes WAL of its own (pruning,
	// first touches after a checkpoint), which would push the commit below
	// out to disk with it.
	require.Equal(t, http.StatusOK, b.do(t, "GET", "/v1/webhooks/"+subID+"/deliveries", token, "").status)
	// As a round does: rows committed with synchronous_commit off.
	dbtest.CommitAsync(t, pool, `INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id) VALUES ($1, 4242, gen_random_uuid())`, subID)

	res = b.do(t, "GET", "/v1/webhooks/"+subID+"/deliveries", token, "")
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.body)
	require.Contains(t, string(res.body), "4242")

	pool = p.CrashAndReopen(t, pool)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE event_seq = 4242`).Scan(&n))
	require.Equal(t, 1, n, "the API showed a delivery that the crash took back")
}

// requireAcknowledgedPresent fails unless every acknowledged event is in the
// log at its seq with its content; it returns the highest acknowledged seq.
func requireAcknowledgedPresent(t *testing.T, pool *pgxpool.Pool, acked []ackedEvent) int64 {
	t.Helper()
	ctx := context.Background()
	stored := map[int64]ackedEvent{}
	rows, err := pool.Query(ctx, `SELECT seq, id, type, data::text FROM event_log`)
	require.NoError(t, err)
	for rows.Next() {
		var e ackedEvent
		require.NoError(t, rows.Scan(&e.seq, &e.id, &e.typ, &e.data))
		stored[e.seq] = e
	}
	require.NoError(t, rows.Err())
	var missing []int64
	highest := int64(0)
	for _, a := range acked {
		highest = max(highest, a.seq)
		s, ok := stored[a.seq]
		if !ok || s.id != a.id {
			missing = append(missing, a.seq)
			continue
		}
		require.Equal(t, a.typ, s.typ, "seq %d", a.seq)
		require.JSONEq(t, a.data, s.data, "seq %d", a.seq)
	}
	require.Empty(t, missing, "acknowledged events lost in the crash (of %d acknowledged, seqs %d..%d)",
		len(acked), acked[0].seq, highest)

	return highest
}
