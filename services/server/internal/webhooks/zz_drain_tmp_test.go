package webhooks_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	gosync "sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func pgCPU(t testing.TB) time.Duration {
	b, err := os.ReadFile("/tmp/pgprof/data/postmaster.pid")
	require.NoError(t, err)
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.Split(string(b), "\n")[0]))
	total := procCPU(pid, true)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		f := strings.Fields(string(st)[strings.LastIndex(string(st), ")")+2:])
		if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
			total += procCPU(p, false)
		}
	}
	return total
}

func procCPU(pid int, children bool) time.Duration {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(st)[strings.LastIndex(string(st), ")")+2:])
	sum := 0
	n := 13
	if children {
		n = 15
	}
	for i := 11; i < n; i++ {
		v, _ := strconv.Atoi(f[i])
		sum += v
	}
	return time.Duration(sum) * 10 * time.Millisecond
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestZZDrain(t *testing.T) {
	subs, _ := strconv.Atoi(os.Getenv("ZZSUBS"))
	per, _ := strconv.Atoi(os.Getenv("ZZPER"))
	if subs == 0 {
		t.Skip()
	}
	unordered := os.Getenv("ZZUNORDERED") != ""
	cfg := fastRetries()
	cfg.Timeout = 10 * time.Second
	cfg.Senders = 100
	b := setupConns(t, cfg, 40)
	var got gosync.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	for i := range subs {
		p := &webhooks.CreateParams{URL: srv.URL + "/hook", EventTypes: []string{fmt.Sprintf("t%d.x", i)}}
		if unordered {
			p.Policy = &webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(10)}
		}
		b.subscribe(t, p)
	}
	ctx := context.Background()
	for k := 0; k < per; k += 100 {
		_, err := b.log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
			var out []sync.NewEvent
			for j := 0; j < 100 && k+j < per; j++ {
				for i := range subs {
					out = append(out, sync.NewEvent{Space: "s1", Type: fmt.Sprintf("t%d.x", i), Actor: "bob"})
				}
			}
			return out, nil
		})
		require.NoError(t, err)
	}
	total := int64(subs * per)
	stat := func() (wal int64, xacts int64, stmts int64) {
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0', (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()),
		 (SELECT coalesce(sum(calls),0)::bigint FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&wal, &xacts, &stmts))
		return
	}
	_, _ = b.db.Pool.Exec(ctx, `SELECT pg_stat_statements_reset()`)
	w0, x0, s0 := stat()
	pg0, me0, t0 := pgCPU(t), selfCPU(), time.Now()
	b.round(t)
	w1, x1, s1 := stat()
	pg1, me1, t1 := pgCPU(t), selfCPU(), time.Now()
	t.Logf("round: %d deliveries in %s; per delivery: pg %.3f ms, worker %.3f ms, WAL %d B, xacts %.4f, stmts %.3f", total, t1.Sub(t0),
		float64((pg1-pg0).Microseconds())/1000/float64(total), float64((me1-me0).Microseconds())/1000/float64(total), (w1-w0)/total,
		float64(x1-x0)/float64(total), float64(s1-s0)/float64(total))
	b.start(t)
	for got.Load() < total {
		time.Sleep(2 * time.Millisecond)
	}
	t2 := time.Now()
	for pendingAll(t, b) > 0 {
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	w2, x2, s2 := stat()
	pg2, me2 := pgCPU(t), selfCPU()
	t.Logf("send: %d deliveries in %s = %.0f/s; per delivery: pg %.3f ms, worker+receiver %.3f ms, WAL %d B, xacts %.4f, stmts %.3f", total, t2.Sub(t1),
		float64(total)/t2.Sub(t1).Seconds(),
		float64((pg2-pg1).Microseconds())/1000/float64(total), float64((me2-me1).Microseconds())/1000/float64(total), (w2-w1)/total,
		float64(x2-x1)/float64(total), float64(s2-s1)/float64(total))
	var plan []string
	conn, err := b.db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE zz(bigint[]) AS SELECT seq, committed_at, id, space, type, actor, occurred_at, data, coalesce(traceparent, '')
FROM event_log WHERE seq = ANY($1) ORDER BY seq`)
	require.NoError(t, err)
	var arr []string
	for g := 5000; g < 15000; g += 100 {
		arr = append(arr, strconv.Itoa(g))
	}
	prow, err := conn.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) EXECUTE zz('{`+strings.Join(arr, ",")+`}')`)
	require.NoError(t, err)
	for prow.Next() {
		var l string
		require.NoError(t, prow.Scan(&l))
		plan = append(plan, l)
	}
	require.NoError(t, prow.Err())
	for _, l := range plan {
		t.Log(l)
	}
	rows, err := b.db.Pool.Query(ctx, `SELECT calls, round(total_exec_time::numeric,1), round(mean_exec_time::numeric,3), wal_bytes, left(regexp_replace(query, '\s+', ' ', 'g'), 110)
	 FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY total_exec_time DESC LIMIT 16`)
	require.NoError(t, err)
	for rows.Next() {
		var calls int64
		var tot, mean float64
		var wal int64
		var q string
		require.NoError(t, rows.Scan(&calls, &tot, &mean, &wal, &q))
		t.Logf("%8d %9.1fms %7.3fms %10d %s", calls, tot, mean, wal, q)
	}
}

func pendingAll(t testing.TB, b *bundle) int {
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'`).Scan(&n))
	return n
}
