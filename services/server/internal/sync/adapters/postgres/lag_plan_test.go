package postgres_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// TestConsumerStatuses_PlanIsCheapEnoughNotToBeJITCompiled: every
// process's /metrics reads the consumers' status at each scrape. Its plan,
// made while the one-row tables it reads have no statistics (the usual
// state until autovacuum analyzes them), must cost less than
// jit_above_cost: above it, PostgreSQL's default jit=on compiles the plan
// on every execution, which cost over half a second of the server's CPU
// per scrape for a query that reads a few rows. The query has no
// parameters, so its plan is made anew for each execution.
func TestConsumerStatuses_PlanIsCheapEnoughNotToBeJITCompiled(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	disableAutovacuum(t, b)
	appendN(t, b.log, 50)
	ctx := context.Background()
	var jitAbove float64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT current_setting('jit_above_cost')::float8`).Scan(&jitAbove))
	var plan string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+postgres.ConsumerStatusSQL).Scan(&plan))
	var parsed []struct {
		Plan struct {
			TotalCost float64 `json:"Total Cost"`
		} `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(plan), &parsed))
	require.Len(t, parsed, 1)
	require.Less(t, parsed[0].Plan.TotalCost, jitAbove, "plan:\n%s", plan)

	sts, err := b.log.ConsumerStatuses(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, sts)
	for _, s := range sts {
		require.EqualValues(t, 50, s.Head, s.Name)
	}
}
