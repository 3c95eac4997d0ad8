package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// TestPlans_ReadTheBatchNotTheBacklog: the statements that record a
// batch's outcomes, or look for a subscription's next due delivery, must
// read the deliveries they are about, not every pending delivery of the
// subscription (or of every subscription): a subscription with a backlog
// would otherwise pay for the whole backlog with every batch. A connection
// keeps the plan it cached for a prepared statement until the table's
// statistics change, so the plans must do so when made for either state a
// connection may find the table in: a few rows that were never analyzed
// (autovacuum off, or not yet run), and a grown table that autovacuum has
// analyzed, mostly delivered with a backlog of pending rows. The plans are
// forced generic here.
func TestPlans_ReadTheBatchNotTheBacklog(t *testing.T) {
	t.Parallel()
	for _, state := range []struct {
		name string
		// delivered and pending rows per subscription; analyze: ANALYZE
		// the table afterwards.
		delivered, pending int
		analyze            bool
	}{
		{name: "NeverAnalyzedAndSmall", pending: 5},
		{name: "AnalyzedWhenGrown", delivered: 20_000, pending: 2_000, analyze: true},
	} {
		t.Run(state.name, func(t *testing.T) {
			t.Parallel()
			db, subs := planDeliveries(t, state.delivered, state.pending, state.analyze)
			checkPlans(t, db, subs)
		})
	}
}

// planDeliveries makes two subscriptions with delivered and pending
// deliveries each, in a table autovacuum leaves alone, analyzed if asked.
func planDeliveries(t *testing.T, delivered, pending int, analyze bool) (*dbtest.DB, [2]string) {
	t.Helper()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	require.NoError(t, authz.CreatePrincipal(ctx, db.Pool, "alice", authz.KindUser))
	require.NoError(t, authz.Grant(ctx, db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightRead}))
	var subs [2]string
	for i := range subs {
		sub, _, err := webhooks.Create(ctx, db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1",
			URL: "http://127.0.0.1:9/hook", AllowPrivateTargets: true})
		require.NoError(t, err)
		subs[i] = sub.ID.String()
	}
	_, err := db.Pool.Exec(ctx, `ALTER TABLE webhook_deliveries SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `
INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id, status)
SELECT s, g, gen_random_uuid(), CASE WHEN g <= $2::int THEN 'delivered' ELSE 'pending' END
FROM unnest($1::uuid[]) s, generate_series(1, $2::int + $3::int) g`, subs[:], delivered, pending)
	require.NoError(t, err)
	if analyze {
		_, err = db.Pool.Exec(ctx, `ANALYZE webhook_deliveries`)
		require.NoError(t, err)
	}
	return db, subs
}

// checkPlans checks the generic plan of each statement that reads a
// batch's deliveries, for a batch after the delivered ones.
func checkPlans(t *testing.T, db *dbtest.DB, subs [2]string) {
	sub, both := "'"+subs[0]+"'", fmt.Sprintf("'{%s,%s}'", subs[0], subs[1])
	for _, c := range []struct {
		name, sql, args string
		// first: the statement wants the subscription's first pending
		// deliveries in the order of one of these indexes, not deliveries
		// by seq.
		first []string
	}{
		{name: "Delivered", sql: deliveredSQL,
			args: both + `, '{20002,20002}', '{200,200}', '{0.1,0.1}', '{"",""}', array[now(), now()], ` + both +
				`, '{7,8}', '{p,p}', 60000, '{"",""}', '{0,0}', '{false,true}', '{true,true}', array[NULL, now()]::timestamptz[]`},
		{name: "Recorded", sql: recordedSQL,
			args: both + `, '{20002,20002}', '{200,200}', '{0.1,0.1}', '{"",""}', array[now(), now()], '{"",""}'`},
		{name: "Failed", sql: failedSQL, args: sub + `, '{20002,20003}', now(), 500, 0.1, 'error', '', ''`},
		{name: "Dead", sql: deadSQL, args: sub + `, '{20002}', 'error'`},
		{name: "Refuse", sql: refuseSQL, args: sub + `, '{20002,20003}', 'not allowed'`},
		{name: "NextDue", sql: nextDueSQL, args: sub, first: []string{"webhook_deliveries_due"}},
		{name: "Claim", sql: claimSQL, args: both + `, '{100,100}', '{false,true}'`,
			first: []string{"webhook_deliveries_pending", "webhook_deliveries_due"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := db.GenericPlan(t, c.sql, c.args)
			var plan []struct{ Plan planNode }
			require.NoError(t, json.Unmarshal([]byte(out), &plan))
			scans := deliveryScans(&plan[0].Plan, nil)
			require.NotEmpty(t, scans, "plan:\n%s", out)
			for _, s := range scans {
				if c.first != nil {
					require.True(t, s.parent != nil && s.parent.NodeType == "Limit" && slices.Contains(c.first, s.node.IndexName),
						"want the first entries of %s; plan:\n%s", c.first, out)
					continue
				}
				require.Contains(t, []string{"webhook_deliveries_pkey", "webhook_deliveries_pending"}, s.node.IndexName,
					"want an index that leads with (subscription_id, event_seq); plan:\n%s", out)
				require.Contains(t, s.node.IndexCond, "event_seq", "want the scan bounded by the seqs; plan:\n%s", out)
			}
		})
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType     string `json:"Node Type"`
	RelationName string `json:"Relation Name"`
	IndexName    string `json:"Index Name"`
	IndexCond    string `json:"Index Cond"`
	// OneTimeFilter: a Result that runs its plans or not, as a whole.
	OneTimeFilter string     `json:"One-Time Filter"`
	Plans         []planNode `json:"Plans"`
}

// scan is a node that reads webhook_deliveries, with its parent.
type scan struct{ node, parent *planNode }

// deliveryScans returns the nodes under n that read webhook_deliveries'
// rows or index entries: the index scans of a bitmap scan stand for it.
func deliveryScans(n, parent *planNode) []scan {
	var out []scan
	switch {
	case n.NodeType == "ModifyTable", n.NodeType == "Bitmap Heap Scan", n.NodeType == "Tid Scan": // a Tid Scan reads the rows it is given
	case n.RelationName == "webhook_deliveries", strings.HasPrefix(n.IndexName, "webhook_deliveries"):
		out = append(out, scan{n, parent})
	}
	up := n
	if n.NodeType == "Result" && n.OneTimeFilter != "" {
		up = parent // a branch run or not as a whole: its scans are its parent's
	}
	for i := range n.Plans {
		out = append(out, deliveryScans(&n.Plans[i], up)...)
	}
	return out
}
