package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// TestCLI_WebhooksResendRecoverEnable runs resend, recover and enable
// --from backlog against a database where no worker sends, and checks what
// they leave pending for the server's sender, and their jobs.
func TestCLI_WebhooksResendRecoverEnable(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	ctx := context.Background()
	environ := []string{"BOTHY_DATABASE_URL=" + db.URL, "BOTHY_WEBHOOKS_ALLOW_PRIVATE_TARGETS=true"}
	cli := func(t *testing.T, want int, args ...string) (string, string) {
		t.Helper()
		code, stdout, stderr := runCLI(t, environ, args...)
		require.Equal(t, want, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		return stdout, stderr
	}
	jsonOf := func(t *testing.T, args ...string) map[string]any {
		t.Helper()
		stdout, _ := cli(t, 0, append(args, "--json")...)
		var obj map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &obj), "%s", stdout)
		return obj
	}
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	log := postgres.NewEventLog(db.Pool, nil)
	t.Cleanup(log.Close)
	rounds := postgres.NewRoundRunner(db.Pool, log, rc, nil)
	round := func(t *testing.T) {
		t.Helper()
		res, err := rounds.Run(ctx, webhooks.NewConsumer(nil))
		require.NoError(t, err)
		require.False(t, res.Full)
	}
	status := func(t *testing.T, id string, seq int) string {
		t.Helper()
		var st string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT status FROM webhook_deliveries WHERE subscription_id = $1 AND event_seq = $2`, id, seq).Scan(&st))
		return st
	}
	// jobs counts the delivery jobs of subscription id that are still to
	// run: one of them sends what resend made pending (the one a round
	// inserted reserves the sender, so resend adds none beside it).
	jobs := func(t *testing.T, id string) int {
		t.Helper()
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'subscription_id' = $2
			AND state IN ('available', 'scheduled', 'retryable')`, webhooks.KindDeliver, id).Scan(&n))
		return n
	}

	cli(t, 0, "authz", "principal", "alice")
	cli(t, 0, "authz", "grant", "--space", "s1", "--principal", "alice", "--right", "read")
	id := jsonOf(t, "webhooks", "create", "--owner", "alice", "--space", "s1", "--url", "http://127.0.0.1:9/hook")["id"].(string)
	cli(t, 0, "events", "emit", "--space", "s1", "--count", "2")
	round(t)

	t.Run("Resend", func(t *testing.T) {
		_, stderr := cli(t, 1, "webhooks", "resend", id, "1")
		require.Contains(t, stderr, "pending already")
		_, err := db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'dead', finished_at = now() WHERE subscription_id = $1 AND event_seq = 1`, id)
		require.NoError(t, err)
		d := jsonOf(t, "webhooks", "resend", id, "1")
		require.Equal(t, "pending", d["status"])
		require.EqualValues(t, 1, d["seq"])
		require.Equal(t, "pending", status(t, id, 1))
		require.Positive(t, jobs(t, id), "a job for the server's sender")
		cli(t, 2, "webhooks", "resend", id, "one")
		cli(t, 2, "webhooks", "resend", id)
	})

	t.Run("EnableFromBacklog", func(t *testing.T) {
		cli(t, 0, "webhooks", "disable", id)
		cli(t, 0, "events", "emit", "--space", "s1", "--count", "2")
		round(t)
		cli(t, 2, "webhooks", "enable", id, "--from", "middle")
		e := jsonOf(t, "webhooks", "enable", id, "--from", "backlog")
		require.Equal(t, "backlog", e["from"])
		require.EqualValues(t, 2, e["created"])
		require.EqualValues(t, 0, e["skipped"])
		require.Nil(t, e["not_delivered"])
		for seq := 1; seq <= 4; seq++ {
			require.Equal(t, "pending", status(t, id, seq), "seq %d", seq)
		}
	})

	t.Run("Recover", func(t *testing.T) {
		_, err := db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'skipped', finished_at = now() WHERE subscription_id = $1 AND event_seq IN (2, 3)`, id)
		require.NoError(t, err)
		r := jsonOf(t, "webhooks", "recover", id, "--from-seq", "2", "--to-seq", "2")
		require.Equal(t, map[string]any{"id": id, "range": map[string]any{"from": 2.0, "to": 2.0}, "reset": 1.0, "created": 0.0, "lost": nil}, r)
		_, stderr := cli(t, 1, "webhooks", "recover", id, "--since", "2001-02-03T04:05:06Z")
		require.Contains(t, stderr, "since: 2001-02-03T04:05:06Z is before the subscription was created")
		r = jsonOf(t, "webhooks", "recover", id, "--since", "2001-02-03T04:05:06Z", "--before-creation")
		require.Equal(t, map[string]any{"id": id, "range": map[string]any{"from": 1.0, "to": 4.0}, "reset": 1.0, "created": 0.0, "lost": nil}, r)
		require.Equal(t, "pending", status(t, id, 3))
		stdout, _ := cli(t, 0, "webhooks", "recover", id, "--from-seq", "1")
		require.Contains(t, stdout, fmt.Sprintf("seqs 1..4 of %s: 0 dead or skipped deliveries pending again, 0 deliveries made", id))

		r = jsonOf(t, "webhooks", "recover", id)
		require.Equal(t, map[string]any{"from": 1.0, "to": 4.0}, r["range"], "from the subscription's creation")
		cli(t, 2, "webhooks", "recover", id, "--from-seq", "1", "--since", "2001-02-03T04:05:06Z")
		cli(t, 2, "webhooks", "recover", id, "--since", "yesterday")
		_, stderr = cli(t, 1, "webhooks", "recover", id, "--from-seq", "3", "--to-seq", "2")
		require.Contains(t, stderr, "to_seq 2 is below from_seq 3")
	})
}
