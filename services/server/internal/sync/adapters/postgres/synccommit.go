package postgres

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
// A connection URL that asks for off or local itself is refused: that is a
// configuration mistake, not a default to correct.
func RequireSynchronousCommit(pc *pgxpool.Config) error {
	if v, ok := pc.ConnConfig.RuntimeParams["synchronous_commit"]; ok && weakSyncCommit(v) {
		return fmt.Errorf("synchronous_commit=%s in the connection settings: bothy's acknowledgments need synchronous commits (remove it, or use on, remote_write or remote_apply)", v)
	}
	if m := optionsSyncCommit.FindStringSubmatch(pc.ConnConfig.RuntimeParams["options"]); m != nil && weakSyncCommit(m[1]) {
		return fmt.Errorf("synchronous_commit=%s in the connection's options: bothy's acknowledgments need synchronous commits (remove it)", m[1])
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
	return nil
}

func ensureSyncCommit(ctx context.Context, conn *pgx.Conn) error {
	var v string
	if err := conn.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&v); err != nil {
		return fmt.Errorf("read synchronous_commit: %w", err)
	}
	if !weakSyncCommit(v) {
		return nil
	}
	if _, err := conn.Exec(ctx, `SET synchronous_commit = on`); err != nil {
		return fmt.Errorf("set synchronous_commit = on (the role's or database's default is %s): %w", v, err)
	}
	return nil
}

// optionsSyncCommit finds "-c synchronous_commit=X" in a libpq options
// string.
var optionsSyncCommit = regexp.MustCompile(`synchronous_commit\s*=\s*'?([A-Za-z0-9_]+)`)

func weakSyncCommit(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "off", "local", "false", "no", "0":
		return true
	}
	return false
}
