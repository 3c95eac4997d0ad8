package liveness

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Session is a database session that holds a liveness lock: a worker
// process that is alive, or a judge checking another one for a moment.
type Session struct {
	PID int32 `json:"pid"`
	// ApplicationName, ClientAddr and BackendStart come from
	// pg_stat_activity; they are empty when the reading role may not see
	// other roles' sessions.
	ApplicationName string     `json:"application_name,omitempty"`
	ClientAddr      string     `json:"client_addr,omitempty"`
	BackendStart    *time.Time `json:"backend_start,omitempty"`
}

func (s *Session) String() string {
	out := fmt.Sprintf("pid %d", s.PID)
	if s.ApplicationName != "" {
		out += " " + s.ApplicationName
	}
	if s.ClientAddr != "" {
		out += " from " + s.ClientAddr
	}
	if s.BackendStart != nil {
		out += " since " + s.BackendStart.UTC().Format(time.RFC3339)
	}
	return out
}

// Querier runs a query; *pgxpool.Pool, *pgx.Conn and pgx.Tx are.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// holdersSQL lists the sessions holding a granted lock of LockClass in
// this database (pg_locks spans the cluster): PostgreSQL shows the first
// key of a two-key advisory lock as classid, with objsubid 2.
const holdersSQL = `
SELECT l.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), ''), a.backend_start
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.classid = $1 AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY l.pid`

// Holders returns the sessions that hold a liveness lock now, in PID
// order: while there is one, a worker process is running on the database.
func Holders(ctx context.Context, q Querier) ([]Session, error) {
	rows, err := q.Query(ctx, holdersSQL, uint32(LockClass))
	if err != nil {
		return nil, fmt.Errorf("liveness holders: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Session, error) {
		var s Session
		err := row.Scan(&s.PID, &s.ApplicationName, &s.ClientAddr, &s.BackendStart)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("liveness holders: %w", err)
	}
	return out, nil
}
