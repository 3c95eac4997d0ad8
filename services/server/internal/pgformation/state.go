package pgformation

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// NodeState is one node as the monitor sees it.
type NodeState struct {
	Name string
	Port int
	// Reported is the state the node's keeper last reported (primary,
	// secondary, catchingup, wait_primary, stop_replication...); Goal is
	// the state the monitor assigned it.
	Reported, Goal string
}

const stateSQL = `
SELECT nodename, nodeport, reportedstate::text, goalstate::text
FROM pgautofailover.node WHERE formationid = 'default' ORDER BY nodeid`

// State returns every node as the monitor sees it.
func (f *Formation) State(ctx context.Context) ([]NodeState, error) {
	conn, err := pgx.Connect(ctx, f.MonitorURL())
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, stateSQL)
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (NodeState, error) {
		var s NodeState
		err := r.Scan(&s.Name, &s.Port, &s.Reported, &s.Goal)
		return s, err
	})
}

// Wait returns once every node's keeper runs, one node is primary and the
// others are its secondaries, as reported and assigned, and the primary
// has its synchronous standbys configured. While a node is still being
// copied it asks the primary for a checkpoint every round, so that
// pg_basebackup does not wait for a spread one. It gives up after three
// minutes.
func (f *Formation) Wait(ctx context.Context) error {
	return poll(ctx, 3*time.Minute, func(ctx context.Context) error {
		for _, n := range f.nodes {
			if !n.Running() {
				return fmt.Errorf("%w: %s: its keeper is not running: %s", errStop, n.name, n.logTail())
			}
		}
		states, err := f.State(ctx)
		if err != nil {
			return err
		}
		primary, settled := f.judge(states)
		if primary == nil {
			return fmt.Errorf("%w: no primary: %v", errNotYet, states)
		}
		if !settled {
			f.checkpoint(ctx, primary)
			return fmt.Errorf("%w: %v", errNotYet, states)
		}
		return primary.hasSyncStandbys(ctx)
	})
}

// judge returns the node the monitor made primary (or is making primary)
// and whether the formation is settled: that node reports primary and
// every other node reports secondary, each as assigned.
func (f *Formation) judge(states []NodeState) (primary *Node, settled bool) {
	settled = len(states) == len(f.nodes)
	for _, s := range states {
		switch s.Goal {
		case "primary", "wait_primary", "single":
			primary = f.byName(s.Name)
			settled = settled && s.Reported == "primary" && s.Goal == "primary"
		default:
			settled = settled && s.Reported == "secondary" && s.Goal == "secondary"
		}
	}
	return primary, settled
}

func (f *Formation) byName(name string) *Node {
	for _, n := range f.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// checkpoint asks n for an immediate checkpoint; a spread checkpoint in
// progress (as pg_basebackup requests) finishes at once. Errors are
// ignored: the node may not be up yet.
func (f *Formation) checkpoint(ctx context.Context, n *Node) {
	conn, err := pgx.Connect(ctx, n.URL("postgres"))
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, _ = conn.Exec(ctx, `CHECKPOINT`)
}

func (n *Node) hasSyncStandbys(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, n.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var names string
	if err := conn.QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&names); err != nil {
		return err
	}
	if names == "" {
		return fmt.Errorf("%w: %s has no synchronous standby configured yet", errNotYet, n.name)
	}
	return nil
}

// Primary returns the node the monitor has made primary (its assigned state
// is primary, wait_primary or single).
func (f *Formation) Primary(ctx context.Context) (*Node, error) {
	states, err := f.State(ctx)
	if err != nil {
		return nil, err
	}
	if p, _ := f.judge(states); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("no primary: %v", states)
}

// WaitWritable returns when n accepts read-write sessions (it is out of
// recovery and not read-only by default), the moment a client asking for
// target_session_attrs=read-write can use it, polling every 50 ms for at
// most limit.
func (n *Node) WaitWritable(ctx context.Context, limit time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		if n.writable(ctx) {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s did not become writable within %s (log %s)", n.name, limit, n.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (n *Node) writable(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, n.URL("postgres"))
	if err != nil {
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ok bool
	err = conn.QueryRow(cctx, `SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'`).Scan(&ok)
	return err == nil && ok
}

// URL is the formation's connection URL as pg_autoctl show uri prints it
// (every node, target_session_attrs=read-write), as user postgres.
func (f *Formation) URL(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, f.cfg.Autoctl, "show", "uri", "--formation", "default", "--pgdata", f.monitor.data)
	cmd.Dir, cmd.Env, cmd.SysProcAttr = f.cfg.Dir, f.env, procAttr(f.cred)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("pg_autoctl show uri: %w", err)
	}
	uri := strings.TrimSpace(string(out))
	if !strings.HasPrefix(uri, "postgres://") {
		return "", fmt.Errorf("pg_autoctl show uri printed %q", uri)
	}
	if !strings.Contains(uri, "@") {
		uri = strings.Replace(uri, "postgres://", "postgres://postgres@", 1)
	}
	return uri, nil
}

// ShellLine is a shell command line that runs pg_autoctl with args against
// this formation, as its keepers run: as the postgres user when the caller
// is root, with the formation's XDG directories, where pg_autoctl keeps
// each node's configuration and state. For people to copy.
func (f *Formation) ShellLine(args ...string) string {
	var parts []string
	if f.cred != nil {
		parts = append(parts, "runuser", "-u", "postgres", "--")
	}
	parts = append(parts, "env")
	for _, kv := range f.env {
		if strings.HasPrefix(kv, "XDG_") || strings.HasPrefix(kv, "PG_CONFIG=") {
			parts = append(parts, shellQuote(kv))
		}
	}
	parts = append(parts, shellQuote(f.cfg.Autoctl))
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

// MonitorData is the monitor's data directory, the --pgdata of
// pg_autoctl's formation-wide commands (show state, perform failover).
func (f *Formation) MonitorData() string { return f.monitor.data }

// shellQuote quotes s for a POSIX shell unless it needs none.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
