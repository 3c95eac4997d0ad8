package dbtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// GenericPlan returns EXPLAIN (FORMAT JSON) of sql executed with args (SQL
// literals, comma separated), prepared on a connection that makes only
// generic plans: the plan a pool connection would cache for the statement
// and keep, made for the tables as they are now.
func (db *DB) GenericPlan(tb testing.TB, sql, args string) string {
	tb.Helper()
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	defer conn.Release()
	// A connection that keeps a setting of its own is closed, not reused.
	defer func() {
		if _, err := conn.Exec(ctx, `DEALLOCATE generic_plan; RESET plan_cache_mode`); err != nil {
			conn.Conn().Close(ctx)
		}
	}()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	if _, err := conn.Exec(ctx, `PREPARE generic_plan AS `+sql); err != nil {
		tb.Fatalf("dbtest: prepare: %v", err)
	}
	var out string
	err = conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE generic_plan(`+args+`)`, pgx.QueryExecModeSimpleProtocol).Scan(&out)
	if err != nil {
		tb.Fatalf("dbtest: explain: %v", err)
	}
	return out
}
