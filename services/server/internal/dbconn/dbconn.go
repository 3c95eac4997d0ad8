// Package dbconn holds what every connection of bothy's to PostgreSQL gets
// where its URL says nothing: the pools of every role, the listener and the
// liveness session. Features may depend on it; the URL handling of the
// composition root and the tools (package dburl) they may not.
package dbconn

import (
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ConnectTimeout is how long a connection attempt waits for each host of
// the URL when the URL sets no connect_timeout (or sets 0). A host that
// stopped answering (its machine lost, or frozen) accepts nothing and
// refuses nothing; without a limit every new connection waits for it, and
// with several hosts (a failover formation's URL) the next one is never
// tried (TestOpenPool_PassesOverAHostThatStoppedAnswering).
const ConnectTimeout = 5 * time.Second

// ApplyDefaults sets on c what bothy needs of every connection and the URL
// left unset: ConnectTimeout.
func ApplyDefaults(c *pgconn.Config) {
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = ConnectTimeout
	}
}
