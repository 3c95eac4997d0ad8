package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// asyncEventSQL commits an event as a producer does inside its counter
// window, before its flush: the counter and the row in one transaction
// that the caller commits asynchronously.
const asyncEventSQL = `
WITH c AS (UPDATE event_seq SET last_seq = last_seq + 1 RETURNING last_seq)
INSERT INTO event_log (seq, committed_at, id, space, type, actor, occurred_at)
SELECT last_seq, clock_timestamp(), $1, 's1', 'item.created', 'writer', now() FROM c`

// TestPullShowsOnlyDurableEvents: a pull may read an event whose commit is
// not on disk yet (producers commit asynchronously and flush after). What
// the page or the stream showed must survive a crash of PostgreSQL right
// after, or a receiver would hold an event, and a seq, that the log then
// gives to another.
func TestPullShowsOnlyDurableEvents(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "Page", true: "Stream"}[stream]
		t.Run(name, func(t *testing.T) {
			p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pool := p.Pool(t)
			require.NoError(t, authz.CreatePrincipal(ctx, pool, "reader", authz.KindUser))
			require.NoError(t, authz.Grant(ctx, pool, &authz.GrantParams{Space: "s1", Principal: "reader", Right: authz.RightRead}))
			_, token, err := authz.CreateToken(ctx, pool, &authz.CreateTokenParams{Principal: "reader", Scopes: []string{authz.ScopeEventsRead}})
			require.NoError(t, err)
			b := &pullBundle{testBundle: &testBundle{base: startServer(t, p.URL, "api")}}
			_, err = pool.Exec(ctx, `VACUUM`) // see TestReadsShowOnlyDurableState
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, b.do(t, "GET", "/v1/spaces/s1/events", token, "").status) // warm up
			dbtest.CommitAsync(t, pool, `SELECT 1`)

			id := "0199c0de-0000-7000-8000-00000000d0d0"
			var st *sseClient
			if stream {
				st = b.openStream(t, ctx, token, "", "")
			}
			dbtest.CommitAsync(t, pool, asyncEventSQL, id)
			if stream {
				require.Contains(t, st.nextEvent(t).data, id)
			} else {
				ids, _ := b.pull(t, token, "/v1/spaces/s1/events")
				require.Equal(t, []string{id}, ids)
			}

			pool = p.CrashAndReopen(t, pool)
			var n int
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM event_log WHERE id = $1`, id).Scan(&n))
			require.Equal(t, 1, n, "the pull showed an event that the crash took back")
		})
	}
}
