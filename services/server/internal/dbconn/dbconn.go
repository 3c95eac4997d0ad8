// Package dbconn holds what every connection of bothy's to PostgreSQL gets
// where its URL says nothing: the pools of every role, the listener and the
// liveness session. Features may depend on it; the URL handling of the
// composition root and the tools (package dburl) they may not.
package dbconn

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"
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

// RegisterTypes teaches every connection of pc the Go types bothy passes
// that pgx does not know natively: google/uuid's UUID, which pgx would
// otherwise encode through its driver.Valuer (a string, parsed back, after
// a failed attempt that builds an error) element by element in every
// uuid[] parameter.
func RegisterTypes(pc *pgxpool.Config) {
	next := pc.AfterConnect
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		pgxuuid.Register(conn.TypeMap())
		if next != nil {
			return next(ctx, conn)
		}
		return nil
	}
}
