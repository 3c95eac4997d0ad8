package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

var (
	deliverySeqs = regexp.MustCompile(`data-testid="delivery-row" data-seq="(\d+)"`)
	nextPage     = regexp.MustCompile(`id="next-page" href="([^"]+)"`)
)

// TestConsole_SeqsBeyondInt4: a subscription's deliveries of seqs past
// 2^31 (past int4) and 2^53 (past the integers a float64 holds) are listed
// page by page, and each one's page shows it.
func TestConsole_SeqsBeyondInt4(t *testing.T) {
	t.Parallel()
	for _, base := range []int64{1 << 31, 1 << 53} {
		t.Run(fmt.Sprint(base), func(t *testing.T) {
			t.Parallel()
			db := dbtest.NewDB(t)
			db.StartLogAt(t, base-1)
			b := &testBundle{db: db, base: startServer(t, db.URL)}
			token := b.principal(t, "alice", authz.RightWrite, "acme")
			id := b.createSubscription(t, token, "acme", newReceiver(t, http.StatusNoContent, "").URL)
			// Role api makes no deliveries: they are written as a round
			// would, one per seq.
			const n = 12
			_, err := db.Pool.Exec(context.Background(), `INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id, status, attempts, finished_at)
SELECT $1, seq, gen_random_uuid(), 'delivered', 1, now() FROM generate_series($2::bigint, $2::bigint + $3 - 1) AS seq`, id, base, n)
			require.NoError(t, err)
			br := b.browser(t)
			br.signIn(token)

			var got []string
			path := "/console/subscriptions/" + id + "?limit=10"
			for path != "" {
				p := br.get(path)
				require.Equal(t, http.StatusOK, p.status, p.body)
				for _, m := range deliverySeqs.FindAllStringSubmatch(p.body, -1) {
					got = append(got, m[1])
				}
				path = ""
				if m := nextPage.FindStringSubmatch(p.body); m != nil {
					path = html.UnescapeString(m[1])
				}
			}
			var want []string
			for i := int64(n - 1); i >= 0; i-- {
				want = append(want, fmt.Sprint(base+i))
			}
			require.Equal(t, want, got, "every delivery once, newest first")

			for _, seq := range []int64{base, base + n - 1} {
				p := br.get(fmt.Sprintf("/console/subscriptions/%s/deliveries/%d", id, seq))
				require.Equal(t, http.StatusOK, p.status, p.body)
				require.Contains(t, p.body, fmt.Sprintf(`<h1 id="delivery-title">Delivery %d</h1>`, seq))
			}
		})
	}
}
