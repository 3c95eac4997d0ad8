package cost

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Database reads what one database of a server has done: its committed
// and rolled-back transactions (pg_stat_database), the server's WAL
// position, and, where the server loads pg_stat_statements, the database's
// statements. It talks to the server through its own connection to the
// maintenance database "postgres", so its reads count in none of the
// measured database's figures. Its methods are not safe for concurrent use.
type Database struct {
	conn *pgx.Conn
	name string
	oid  uint32
	// Statements says whether pg_stat_statements answers on this server.
	Statements bool
}

// OpenDatabase connects to the server at adminURL (its "postgres"
// database) to measure database name. It sees pg_stat_statements when the
// server preloads it (the extension is created in "postgres" if missing).
func OpenDatabase(ctx context.Context, adminURL, name string) (*Database, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("cost: connect: %w", err)
	}
	d := &Database{conn: conn, name: name}
	if err := conn.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = $1`, name).Scan(&d.oid); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("cost: database %s: %w", name, err)
	}
	d.Statements = d.enableStatements(ctx)
	return d, nil
}

// enableStatements creates pg_stat_statements in "postgres" unless there,
// and says whether it answers (it does only when preloaded).
func (d *Database) enableStatements(ctx context.Context) bool {
	if _, err := d.conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return false
	}
	var n int64
	return d.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_statements LIMIT 1`).Scan(&n) == nil
}

// Close closes the connection.
func (d *Database) Close(ctx context.Context) { _ = d.conn.Close(context.WithoutCancel(ctx)) }

// AwaitQuiet waits, at most within, until no session is connected to the
// database and its transaction count reads the same twice 200 ms apart. A
// backend's statistics reach pg_stat_database when it flushes them, which
// an idle backend may put off for seconds, but always before it exits; so
// once every session has ended, the counts are complete.
func (d *Database) AwaitQuiet(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	last := int64(-1)
	for {
		var sessions int
		if err := d.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datid = $1`, d.oid).Scan(&sessions); err != nil {
			return fmt.Errorf("cost: sessions: %w", err)
		}
		if sessions == 0 {
			x, err := d.Transactions(ctx)
			if err != nil {
				return err
			}
			if x == last {
				return nil
			}
			last = x
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cost: database %s not quiet after %s (%d sessions)", d.name, within, sessions)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Transactions is the database's xact_commit + xact_rollback.
func (d *Database) Transactions(ctx context.Context) (int64, error) {
	var n int64
	err := d.conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datid = $1`, d.oid).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("cost: transactions: %w", err)
	}
	return n, nil
}

// WALPosition is the server's WAL insert position in bytes: the WAL
// written by every database of the server, so it measures one database
// only on a server nothing else uses.
func (d *Database) WALPosition(ctx context.Context) (int64, error) {
	var n int64
	if err := d.conn.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&n); err != nil {
		return 0, fmt.Errorf("cost: WAL position: %w", err)
	}
	return n, nil
}

// ResetStatements forgets the database's statements in
// pg_stat_statements, so the next reads count from now.
func (d *Database) ResetStatements(ctx context.Context) error {
	if !d.Statements {
		return nil
	}
	if _, err := d.conn.Exec(ctx, `SELECT pg_stat_statements_reset(0, $1, 0)`, d.oid); err != nil {
		return fmt.Errorf("cost: reset pg_stat_statements: %w", err)
	}
	return nil
}

// StatementCalls is how many statements the database ran since the last
// ResetStatements (BEGIN and COMMIT included).
func (d *Database) StatementCalls(ctx context.Context) (int64, error) {
	var n int64
	err := d.conn.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements WHERE dbid = $1`, d.oid).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("cost: statements: %w", err)
	}
	return n, nil
}

// Statement is one normalized statement of pg_stat_statements.
type Statement struct {
	Query           string
	Calls, Rows     int64
	TotalMS, MeanMS float64
	WALBytes        int64
	ShareOfTime     float64 // of the database's total execution time
	// JITFunctions is how many functions PostgreSQL JIT-compiled for it:
	// above 0, its plan cost more than jit_above_cost, and each execution
	// paid for compiling.
	JITFunctions int64
}

// topStatementsSQL reads the database's statements by total execution
// time, with each one's share of the total.
const topStatementsSQL = `
SELECT query, calls, total_exec_time, mean_exec_time, rows, wal_bytes::bigint,
       coalesce(total_exec_time / nullif(sum(total_exec_time) OVER (), 0), 0), jit_functions
FROM pg_stat_statements WHERE dbid = $1
ORDER BY total_exec_time DESC LIMIT $2`

// TopStatements returns the n statements that took the most execution
// time since the last ResetStatements.
func (d *Database) TopStatements(ctx context.Context, n int) ([]Statement, error) {
	rows, err := d.conn.Query(ctx, topStatementsSQL, d.oid, n)
	if err != nil {
		return nil, fmt.Errorf("cost: top statements: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Statement, error) {
		var s Statement
		err := row.Scan(&s.Query, &s.Calls, &s.TotalMS, &s.MeanMS, &s.Rows, &s.WALBytes, &s.ShareOfTime, &s.JITFunctions)
		return s, err
	})
}

var spaces = regexp.MustCompile(`\s+`)

// OneLine is the statement's text on one line, cut to at most width
// characters.
func (s *Statement) OneLine(width int) string {
	q := strings.TrimSpace(spaces.ReplaceAllString(s.Query, " "))
	if len(q) > width {
		q = q[:width-3] + "..."
	}
	return q
}

// PrintTop writes the statements that took the most PostgreSQL time as a
// table: calls, time, rows, WAL, share, JIT-compiled functions and the
// statement on one line.
func PrintTop(w io.Writer, top []Statement) {
	if len(top) == 0 {
		return
	}
	fmt.Fprintf(w, "\ntop statements by PostgreSQL time (pg_stat_statements, this database, the whole window):\n")
	fmt.Fprintf(w, "%9s %10s %9s %10s %12s %6s %6s  %s\n", "calls", "total ms", "mean ms", "rows", "wal_bytes", "share", "jit fn", "statement")
	for _, s := range top {
		fmt.Fprintf(w, "%9d %10.1f %9.3f %10d %12d %5.1f%% %6d  %s\n", s.Calls, s.TotalMS, s.MeanMS, s.Rows, s.WALBytes, 100*s.ShareOfTime, s.JITFunctions, s.OneLine(150))
	}
}
