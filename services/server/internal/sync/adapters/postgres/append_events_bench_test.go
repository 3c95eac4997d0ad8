package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// BenchmarkAppendEvents measures the events per second 16 producers append
// through the counter when each transaction carries several events, the
// figure to set against a consumer's rounds: BenchmarkAppend's transactions
// carry one. Each transaction writes its events to spaces taken in turn
// from 16, as the events of many spaces would arrive.
//
//	go test ./services/server/internal/sync/adapters/postgres -run '^$' -bench BenchmarkAppendEvents -benchtime 3s
func BenchmarkAppendEvents(b *testing.B) {
	db := dbtest.NewDB(b)
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		b.Fatal(err)
	}
	pc.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	log := postgres.NewEventLog(pool, nil)
	defer log.Close()
	for _, perTx := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("producers=16/events=%d", perTx), func(b *testing.B) {
			runConcurrent(b, 16, func(ctx context.Context, i int) error {
				_, err := log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
					evs := make([]sync.NewEvent, perTx)
					for j := range evs {
						evs[j] = sync.NewEvent{Space: fmt.Sprintf("s%d", (i+j)%16), Type: "item.created", Actor: "bench",
							Data: []byte(fmt.Sprintf(`{"n":%d}`, j))}
					}
					return evs, nil
				})
				return err
			})
			b.ReportMetric(float64(b.N*perTx)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
