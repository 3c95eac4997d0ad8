package dbmigrate_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/migrations"
	"github.com/bothy/bothy/services/server/internal/dbmigrate"
)

// migrationsBefore is the embedded migration set without the files from
// version on: the schema a previous release ran on.
func migrationsBefore(t *testing.T, version string) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	entries, err := fs.ReadDir(migrations.FS, ".")
	require.NoError(t, err)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") || e.Name() >= version {
			continue
		}
		body, err := fs.ReadFile(migrations.FS, e.Name())
		require.NoError(t, err)
		out[e.Name()] = &fstest.MapFile{Data: body}
	}
	return out
}

// subscriptionLease is one subscription's lease as both sets of columns
// hold it.
type subscriptionLease struct {
	pumpJob, leaseJob     *int64
	pumpOwner, leaseOwner *string
	pumpUntil, leaseUntil *time.Time
}

func readLease(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) subscriptionLease {
	t.Helper()
	var l subscriptionLease
	require.NoError(t, pool.QueryRow(context.Background(), `
SELECT pump_job_id, lease_job_id, pump_owner, lease_owner, pump_until, lease_until
FROM webhook_subscriptions WHERE id = $1`, id).Scan(&l.pumpJob, &l.leaseJob, &l.pumpOwner, &l.leaseOwner, &l.pumpUntil, &l.leaseUntil))
	return l
}

// requireOneLease requires both sets of columns to hold job, owner and
// until (nil: NULL).
func requireOneLease(t *testing.T, l subscriptionLease, job *int64, owner *string, until *time.Time, msg string) {
	t.Helper()
	require.Equal(t, job, l.pumpJob, msg+": pump_job_id")
	require.Equal(t, job, l.leaseJob, msg+": lease_job_id")
	require.Equal(t, owner, l.pumpOwner, msg+": pump_owner")
	require.Equal(t, owner, l.leaseOwner, msg+": lease_owner")
	if until == nil {
		require.Nil(t, l.pumpUntil, msg+": pump_until")
		require.Nil(t, l.leaseUntil, msg+": lease_until")
		return
	}
	require.NotNil(t, l.pumpUntil, msg+": pump_until")
	require.NotNil(t, l.leaseUntil, msg+": lease_until")
	require.True(t, until.Equal(*l.pumpUntil), "%s: pump_until %v, want %v", msg, *l.pumpUntil, *until)
	require.True(t, until.Equal(*l.leaseUntil), "%s: lease_until %v, want %v", msg, *l.leaseUntil, *until)
}

// TestUp_TheSendersLeaseIsOneLeaseUnderBothNames: while the previous
// release (writing pump_*) and this one (writing lease_*) run on one
// database, each sees the other's writes of a subscription's lease. The
// migration backfills the leases written before it; afterwards every write
// of either set, in an update or an insert, shows in the other, including
// a write of one column alone and the ends of a lease as each release
// writes them.
func TestUp_TheSendersLeaseIsOneLeaseUnderBothNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	_, err := dbmigrate.UpFS(ctx, pool, migrationsBefore(t, "0011_"))
	require.NoError(t, err)

	// insert writes subscription id as a release writing the lease columns
	// of prefix would ("pump_", "lease_"; "" for none).
	insert := func(id uuid.UUID, prefix string, job int64, owner string, until time.Time) {
		t.Helper()
		cols, vals := "", ""
		if prefix != "" {
			cols = fmt.Sprintf(", %[1]sjob_id, %[1]sowner, %[1]suntil", prefix)
			vals = ", $2, $3, $4"
		}
		args := []any{id}
		if prefix != "" {
			args = append(args, job, owner, until)
		}
		_, err := pool.Exec(ctx, `INSERT INTO webhook_subscriptions (id, owner, space, url, secret`+cols+`)
VALUES ($1, 'alice', 's1', 'https://receiver.invalid/hook', 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='`+vals+`)`, args...)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO principals (id, kind) VALUES ('alice', 'user')`)
	require.NoError(t, err)
	held, free := uuid.New(), uuid.New()
	until := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	insert(free, "", 0, "", until)
	insert(held, "pump_", 7, "p1", until)

	_, err = dbmigrate.Up(ctx, pool)
	require.NoError(t, err)
	requireOneLease(t, readLease(t, pool, held), ptr(int64(7)), ptr("p1"), &until, "backfilled")
	requireOneLease(t, readLease(t, pool, free), nil, nil, nil, "no lease backfilled")

	later := until.Add(time.Minute)
	steps := []struct {
		name, sql string
		args      []any
		job       *int64
		owner     *string
		until     *time.Time
	}{
		{"the previous release takes the lease", `UPDATE webhook_subscriptions SET pump_job_id = $2, pump_until = $3, pump_owner = 'p2' WHERE id = $1`,
			[]any{8, until}, ptr(int64(8)), ptr("p2"), &until},
		{"this release renews it", `UPDATE webhook_subscriptions SET lease_job_id = $2, lease_until = $3, lease_owner = 'p2' WHERE id = $1`,
			[]any{8, later}, ptr(int64(8)), ptr("p2"), &later},
		{"the previous release renews only its end", `UPDATE webhook_subscriptions SET pump_until = $2 WHERE id = $1`,
			[]any{until}, ptr(int64(8)), ptr("p2"), &until},
		{"this release takes it over", `UPDATE webhook_subscriptions SET lease_job_id = 9, lease_owner = 'p3', lease_until = $2 WHERE id = $1`,
			[]any{later}, ptr(int64(9)), ptr("p3"), &later},
		{"the previous release disables the subscription", `UPDATE webhook_subscriptions SET status = 'disabled', disabled_cause = 'manual', disabled_at = now(), pump_job_id = NULL, pump_until = NULL WHERE id = $1`,
			nil, nil, ptr("p3"), nil},
		{"this release reserves it", `UPDATE webhook_subscriptions SET lease_job_id = NULL, lease_owner = NULL, lease_until = $2 WHERE id = $1`,
			[]any{until}, nil, nil, &until},
		{"the previous release releases it", `UPDATE webhook_subscriptions SET pump_job_id = NULL, pump_until = NULL, pump_owner = NULL WHERE id = $1`,
			nil, nil, nil, nil},
		{"an update of neither keeps both", `UPDATE webhook_subscriptions SET keeper_wake_at = now() WHERE id = $1`,
			nil, nil, nil, nil},
	}
	for _, s := range steps {
		_, err := pool.Exec(ctx, s.sql, append([]any{free}, s.args...)...)
		require.NoError(t, err, s.name)
		requireOneLease(t, readLease(t, pool, free), s.job, s.owner, s.until, s.name)
	}

	byOld, byNew := uuid.New(), uuid.New()
	insert(byOld, "pump_", 3, "p4", until)
	requireOneLease(t, readLease(t, pool, byOld), ptr(int64(3)), ptr("p4"), &until, "inserted by the previous release")
	insert(byNew, "lease_", 4, "p5", later)
	requireOneLease(t, readLease(t, pool, byNew), ptr(int64(4)), ptr("p5"), &later, "inserted by this release")
}

func ptr[T any](v T) *T { return &v }
