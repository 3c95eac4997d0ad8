package opscheck

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// runbooks are the operations documents whose SQL operators paste into psql.
var runbooks = []string{"../../../../ops/alerting.md", "../../../../ops/signals.md"}

// sqlBlock is a fenced SQL block of a Markdown document.
var sqlBlock = regexp.MustCompile("(?s)```sql\n(.*?)```")

// runbookStatements returns the statements of doc's SQL blocks, without
// comments and without the BEGIN and ROLLBACK around a statement.
func runbookStatements(doc string) []string {
	var out []string
	for _, m := range sqlBlock.FindAllStringSubmatch(doc, -1) {
		var lines []string
		for _, l := range strings.Split(m[1], "\n") {
			if i := strings.Index(l, "--"); i >= 0 {
				l = l[:i]
			}
			lines = append(lines, l)
		}
		for _, st := range strings.Split(strings.Join(lines, "\n"), ";") {
			st = strings.TrimSpace(st)
			if st == "" || st == "BEGIN" || st == "ROLLBACK" {
				continue
			}
			out = append(out, st)
		}
	}
	return out
}

// TestRunbookSQL plans every SQL statement of the runbooks on a migrated
// database, so a renamed table or column fails here and not in an outage.
func TestRunbookSQL(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	n := 0
	for _, f := range runbooks {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, st := range runbookStatements(string(b)) {
			_, err := db.Pool.Exec(context.Background(), "EXPLAIN "+st)
			require.NoError(t, err, "%s:\n%s", f, st)
			n++
		}
	}
	require.GreaterOrEqual(t, n, 9, "the runbooks' statements were found")
}
