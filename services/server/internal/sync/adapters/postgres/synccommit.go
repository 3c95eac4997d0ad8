package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/dbfault"
)

// ErrAsyncCommitRequested is returned (wrapped) by a connection of a pool
// that RequireSynchronousCommit configured when the connection itself asked
// the server for synchronous_commit off or local.
var ErrAsyncCommitRequested = errors.New("the connection asks for asynchronous commits")

// RequireSynchronousCommit makes every connection of pc commit
// synchronously unless its transaction says otherwise.
//
// The log's durability rests on synchronous commits that write WAL: the
// producer's flush, River's fetch of a job and the webhook sender's claim
// each flush the WAL past the asynchronous commits before them (a
// producer's counter window, a consumer round). A role or database whose
// default synchronous_commit is off (or local, which does not wait for a
// synchronous standby) would make all of them asynchronous without a word,
// so each new connection is set to on when it finds such a default.
// Stronger settings (remote_write, remote_apply) are kept.
//
// A connection that asks for off or local itself is refused with
// ErrAsyncCommitRequested: that is a configuration mistake, not a default
// to correct. The server is asked, after connecting, where its setting
// came from, so every way of asking counts, however PostgreSQL spells or
// parses it: a synchronous_commit parameter, "-c synchronous-commit=off"
// or "--synchronous_commit=off" in options, PGOPTIONS
// (TestOpenPool_SynchronousCommit).
//
// It also watches every connection for PostgreSQL's warning that a
// commit's wait for the synchronous standbys was cancelled
// (standbyWaitCancelled).
func RequireSynchronousCommit(pc *pgxpool.Config) {
	notice := pc.ConnConfig.OnNotice
	pc.ConnConfig.OnNotice = func(c *pgconn.PgConn, n *pgconn.Notice) {
		noteStandbyWaitCancelled(c, n)
		if notice != nil {
			notice(c, n)
		}
	}
	next := pc.AfterConnect
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if next != nil {
			if err := next(ctx, conn); err != nil {
				return err
			}
		}
		return ensureSyncCommit(ctx, conn)
	}
}

// syncCommitSQL reads the session's setting; syncCommitSourceSQL also
// where it came from: "client" is a value the connection sent at start
// (startup parameters and options); others are defaults of the server,
// database or role. pg_settings builds every setting's row, so it is read
// only when the setting is weak.
const (
	syncCommitSQL       = `SELECT current_setting('synchronous_commit')`
	syncCommitSourceSQL = `SELECT setting, source FROM pg_settings WHERE name = 'synchronous_commit'`
)

func ensureSyncCommit(ctx context.Context, conn *pgx.Conn) error {
	var v, source string
	if err := conn.QueryRow(ctx, syncCommitSQL).Scan(&v); err != nil {
		return fmt.Errorf("read synchronous_commit: %w", err)
	}
	if !weakSyncCommit(v) {
		return nil
	}
	if err := conn.QueryRow(ctx, syncCommitSourceSQL).Scan(&v, &source); err != nil {
		return fmt.Errorf("read synchronous_commit: %w", err)
	}
	if source == "client" {
		return fmt.Errorf("%w: synchronous_commit=%s, set by the connection's parameters or options (or PGOPTIONS); "+
			"bothy's acknowledgments need synchronous commits (remove it, or use on, remote_write or remote_apply)", ErrAsyncCommitRequested, v)
	}
	if _, err := conn.Exec(ctx, `SET synchronous_commit = on`); err != nil {
		return fmt.Errorf("set synchronous_commit = on (the %s default is %s): %w", source, v, err)
	}
	return nil
}

// standbyWaitCancelledKey marks, in a connection's CustomData, a generic
// warning since the last standbyWaitCancelled.
const standbyWaitCancelledKey = "bothy.standby_wait_cancelled"

// noteStandbyWaitCancelled marks c when the server sends a generic warning
// (SQLSTATE 01000). A commit that waits for synchronous standbys and whose
// query is cancelled meanwhile (pg_cancel_backend, a client's cancel
// request) stops waiting and succeeds as a local commit, with such a
// warning ("canceling wait for synchronous replication due to user
// request"; SyncRepWaitForLSN). The warning has no code of its own and its
// text is translated, so every generic warning counts; the flush
// statements checked raise no other.
func noteStandbyWaitCancelled(c *pgconn.PgConn, n *pgconn.Notice) {
	if cmp.Or(n.SeverityUnlocalized, n.Severity) == "WARNING" && n.Code == "01000" {
		c.CustomData()[standbyWaitCancelledKey] = true
	}
}

// standbyWaitCancelled returns dbfault.ErrUnconfirmed if c got the warning
// of a cancelled wait for the standbys since the last call, and forgets
// it. Call it before a flush to clear, and after it to check. It sees the
// warning only on connections of a pool that RequireSynchronousCommit
// configured, as every pool of bothy's roles is.
func standbyWaitCancelled(c *pgconn.PgConn) error {
	if c.CustomData()[standbyWaitCancelledKey] == true {
		delete(c.CustomData(), standbyWaitCancelledKey)
		return dbfault.ErrUnconfirmed
	}
	return nil
}

func weakSyncCommit(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "off", "local", "false", "no", "0":
		return true
	}
	return false
}
