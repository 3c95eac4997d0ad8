package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
)

func TestEventsEmitThenConsumersStatus(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	environ := []string{"BOTHY_DATABASE_URL=" + db.URL}

	code, out, stderr := runCLI(t, environ, "events", "emit", "--space", "s1", "--type", "item.created", "--count", "25", "--concurrency", "4")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "appended 25 events to space s1 (head seq 25)")

	code, out, stderr = runCLI(t, environ, "consumers", "status", "--json")
	require.Equal(t, 0, code, stderr)
	var sts []sync.ConsumerStatusJSON
	require.NoError(t, json.Unmarshal([]byte(out), &sts))
	require.Len(t, sts, 3)
	for _, s := range sts {
		require.Equal(t, int64(25), s.Head, s.Name)
		require.Equal(t, int64(25), s.Lag, s.Name)
		require.Greater(t, s.PendingAgeSeconds, 0.0, s.Name)
		require.Nil(t, s.LastRoundAt, s.Name)
	}

	code, out, _ = runCLI(t, environ, "consumers", "status")
	require.Equal(t, 0, code)
	require.Contains(t, out, "CONSUMER")
	require.Contains(t, out, "never")

	// Retention removes seqs 1..10 before any consumer read them.
	_, err := db.Pool.Exec(context.Background(), `DELETE FROM event_log WHERE seq <= 10`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(), `UPDATE event_log_retention SET low_seq = 11`)
	require.NoError(t, err)
	code, out, stderr = runCLI(t, environ, "consumers", "status", "--json")
	require.Equal(t, 0, code, stderr)
	var lost []struct {
		Name string `json:"name"`
		Lost *struct {
			From int64 `json:"from"`
			To   int64 `json:"to"`
		} `json:"lost"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &lost))
	require.Len(t, lost, 3)
	for _, s := range lost {
		require.NotNil(t, s.Lost, s.Name)
		require.Equal(t, [2]int64{1, 10}, [2]int64{s.Lost.From, s.Lost.To}, s.Name)
	}
	code, out, _ = runCLI(t, environ, "consumers", "status")
	require.Equal(t, 0, code)
	require.Contains(t, out, "LOST")
	require.Contains(t, out, "1..10")

	code, _, stderr = runCLI(t, environ, "events", "emit", "--space", "s1", "--data", "[1]")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--data must be a JSON object")
	code, _, stderr = runCLI(t, environ, "events", "emit", "--space", "s1", "--type", "Bad Type")
	require.Equal(t, 1, code)
	require.Regexp(t, `event type:? "Bad Type"`, stderr)
}
