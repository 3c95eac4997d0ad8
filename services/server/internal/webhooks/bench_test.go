package webhooks_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	gosync "sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// BenchmarkDeliveries measures deliveries per second to a local receiver,
// from the round that records them to the last 2xx, with the real round,
// a real River client and a real HTTP server. Every iteration delivers
// 2000 requests: 2000 events to 1 subscription, or 20 events to each of
// 100 subscriptions.
func BenchmarkDeliveries(b *testing.B) {
	for _, subs := range []int{1, 100} {
		b.Run(fmt.Sprintf("subscriptions=%d", subs), func(b *testing.B) { benchDeliveries(b, subs, 2000) })
	}
}

func benchDeliveries(b *testing.B, subs, total int) {
	cfg := fastRetries()
	cfg.Timeout = 10 * time.Second
	bn := setupConns(b, cfg, 24) // as database.max_conns would be set for a worker with 20 delivery slots
	var got gosync.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	for range subs {
		bn.subscribe(b, &webhooks.CreateParams{URL: srv.URL + "/hook"})
	}
	bn.start(b)
	events := total / subs
	ctx := context.Background()
	var elapsed time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		want := got.Load() + int64(events*subs)
		bn.emit(b, "s1", events)
		b.StartTimer()
		start := time.Now()
		bn.round(b)
		deadline := time.Now().Add(5 * time.Minute)
		for got.Load() < want {
			if time.Now().After(deadline) {
				b.Fatalf("only %d of %d delivered", got.Load(), want)
			}
			time.Sleep(time.Millisecond)
		}
		elapsed += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*events*subs)/elapsed.Seconds(), "deliveries/s")
	// The last outcome is recorded right after the receiver answered.
	eventually(b, 10*time.Second, func() bool {
		var pending int
		require.NoError(b, bn.db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status <> 'delivered'`).Scan(&pending))
		return pending == 0
	}, "every delivery recorded as delivered")
	require.Equal(b, int64(b.N*events*subs), got.Load(), "no duplicates")
}
