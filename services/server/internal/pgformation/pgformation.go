// Package pgformation runs a highly available PostgreSQL on this machine: a
// pg_auto_failover formation of a monitor, a primary and synchronous
// standbys, each node a PostgreSQL cluster under its own pg_autoctl keeper,
// from the local binaries and in one directory. bothy dev --ha and the
// failover test use it; a node can be lost as when its machine dies (Kill:
// the keeper and PostgreSQL SIGKILLed at once) and brought back (Rejoin:
// the keeper restarted, which rewinds the node into a standby).
//
// pg_autoctl comes with the Debian packages pg-auto-failover-cli and
// postgresql-NN-auto-failover (the monitor's extension). Every process runs
// as the postgres user when the caller is root (PostgreSQL refuses root)
// and listens on 127.0.0.1 only, with trust authentication and no TLS.
package pgformation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/internal/pgbin"
	"github.com/bothy/bothy/services/server/internal/pgcluster"
)

// Config says where a formation lives and how it fails over.
type Config struct {
	// Dir holds the nodes' data directories (Dir/monitor, Dir/node1...),
	// pg_autoctl's configuration and state (Dir/xdg) and one log per node
	// (Dir/node1.log...). Required.
	Dir string
	// Standbys is the number of standby nodes next to the primary.
	// Default 1.
	Standbys int
	// Ports are the monitor's port followed by each node's. Default: free
	// ports, chosen when the formation is created.
	Ports []int
	// DBName is the database the nodes create and the formation's URL
	// names. Default "bothy".
	DBName string
	// FastFailover shortens the monitor's health checks and the time it
	// waits for a lost primary to demote itself, so a standby is promoted a
	// few seconds after the primary is lost instead of about 50 s. It is
	// safe where a lost node cannot be partitioned away while still
	// running (one machine: tests, bothy dev). Default false:
	// pg_auto_failover's own timings.
	FastFailover bool
	// Bin is the folder with PostgreSQL's server binaries. Default
	// pgbin.Server.
	Bin string
	// Autoctl is the pg_autoctl binary. Default: pgbin.Autoctl.
	Autoctl string
}

// Formation is a running formation. Its methods are not safe for
// concurrent use.
type Formation struct {
	cfg     Config
	cred    *syscall.Credential
	env     []string
	monitor *Node
	nodes   []*Node
}

// Node is the monitor or one PostgreSQL node of the formation, with its
// keeper process.
type Node struct {
	f      *Formation
	name   string
	port   int
	data   string
	log    string
	keeper *exec.Cmd
	done   chan struct{}
}

// New creates a formation in cfg.Dir, starts the monitor and every node,
// and returns once the primary and its synchronous standbys are in place
// (Wait). Close stops it; New stops what it started when it fails.
func New(ctx context.Context, cfg *Config) (_ *Formation, err error) {
	f := &Formation{cfg: *cfg}
	if err := f.configure(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close(context.WithoutCancel(ctx))
		}
	}()
	if err := f.createMonitor(ctx); err != nil {
		return nil, err
	}
	for i := range f.cfg.Standbys + 1 {
		name := fmt.Sprintf("node%d", i+1)
		n := f.node(name, f.cfg.Ports[i+1])
		if err := n.start(f.createArgs(n)...); err != nil {
			return nil, err
		}
		f.nodes = append(f.nodes, n)
	}
	if err := f.Wait(ctx); err != nil {
		return nil, fmt.Errorf("pg_auto_failover formation did not form: %w (logs in %s)", err, f.cfg.Dir)
	}
	return f, nil
}

// configure fills in the defaults and prepares the directory.
func (f *Formation) configure() error {
	c := &f.cfg
	if c.Dir == "" {
		return errors.New("pgformation: Config.Dir is required")
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return err
	}
	c.Dir, c.Standbys, c.DBName = dir, cmp.Or(c.Standbys, 1), cmp.Or(c.DBName, "bothy")
	if c.Bin == "" {
		if c.Bin, err = pgbin.Server(); err != nil {
			return err
		}
	}
	if c.Autoctl == "" {
		if c.Autoctl, err = pgbin.Autoctl(c.Bin); err != nil {
			return err
		}
	}
	if err := f.choosePorts(); err != nil {
		return err
	}
	return f.prepareDir()
}

func (f *Formation) choosePorts() error {
	c := &f.cfg
	if len(c.Ports) != 0 && len(c.Ports) != c.Standbys+2 {
		return fmt.Errorf("pgformation: Config.Ports has %d ports, want %d (the monitor's and each node's)", len(c.Ports), c.Standbys+2)
	}
	if len(c.Ports) == 0 {
		for range c.Standbys + 2 {
			p, err := pgcluster.FreePort()
			if err != nil {
				return err
			}
			c.Ports = append(c.Ports, p)
		}
	}
	return nil
}

// prepareDir creates the directory and pg_autoctl's XDG folders, owned by
// the postgres user when running as root, and the keepers' environment.
func (f *Formation) prepareDir() error {
	root := os.Geteuid() == 0
	var uid, gid int
	if root {
		u, err := user.Lookup("postgres")
		if err != nil {
			return errors.New("pgformation: running as root, and there is no postgres user to run PostgreSQL as")
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		f.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := reachable(f.cfg.Dir); err != nil {
			return err
		}
	}
	if err := mkdirReachable(f.cfg.Dir, root); err != nil {
		return err
	}
	xdg := filepath.Join(f.cfg.Dir, "xdg")
	dirs := []string{f.cfg.Dir, xdg, filepath.Join(xdg, "config"), filepath.Join(xdg, "data"), filepath.Join(xdg, "run")}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if root {
			if err := os.Chown(d, uid, gid); err != nil {
				return err
			}
		}
	}
	f.env = []string{"HOME=" + f.cfg.Dir, "PATH=" + f.cfg.Bin + ":/usr/bin:/bin", "PG_CONFIG=" + filepath.Join(f.cfg.Bin, "pg_config"),
		"XDG_CONFIG_HOME=" + filepath.Join(xdg, "config"), "XDG_DATA_HOME=" + filepath.Join(xdg, "data"),
		"XDG_RUNTIME_DIR=" + filepath.Join(xdg, "run"), "LANG=C.UTF-8"}
	return nil
}

// UnreachableError is the error of New when, running as root, a folder
// above Config.Dir may not be searched by others, so the postgres user that
// runs PostgreSQL could not reach the nodes' directories.
type UnreachableError struct {
	Folder string      // the folder others may not search
	Mode   os.FileMode // its permissions
	Dir    string      // the formation's directory
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("pgformation: %s (mode %04o) is private to its owner, so PostgreSQL, which runs as the postgres user, "+
		"cannot reach %s; let others pass through it (chmod o+x %s) or choose a directory elsewhere", e.Folder, e.Mode, e.Dir, e.Folder)
}

// mkdirReachable creates dir and the folders above it that are missing.
// Those folders are for the postgres user to pass through when running as
// root: they get mode 0711 (others may search them, not list them).
func mkdirReachable(dir string, root bool) error {
	var missing []string
	for d := filepath.Dir(dir); d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if !root {
		return nil
	}
	for _, d := range missing {
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	return nil
}

// reachable returns an *UnreachableError when a folder above dir may not
// be searched by others.
func reachable(dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o001 == 0 {
			return &UnreachableError{Folder: d, Mode: st.Mode().Perm(), Dir: dir}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func (f *Formation) node(name string, port int) *Node {
	return &Node{f: f, name: name, port: port, data: filepath.Join(f.cfg.Dir, name), log: filepath.Join(f.cfg.Dir, name+".log")}
}

// createMonitor creates and starts the monitor and, with FastFailover,
// shortens its timings before any node registers.
func (f *Formation) createMonitor(ctx context.Context) error {
	m := f.node("monitor", f.cfg.Ports[0])
	if err := m.start("create", "monitor", "--pgdata", m.data, "--pgport", strconv.Itoa(m.port), "--hostname", "127.0.0.1",
		"--auth", "trust", "--no-ssl", "--pgctl", filepath.Join(f.cfg.Bin, "pg_ctl"), "--run"); err != nil {
		return err
	}
	f.monitor = m
	err := poll(ctx, 60*time.Second, func(ctx context.Context) error {
		if !m.Running() {
			return fmt.Errorf("%w: pg_autoctl exited: %s", errStop, m.logTail())
		}
		conn, err := pgx.Connect(ctx, f.MonitorURL())
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, `SELECT 1 FROM pgautofailover.formation`)
		return err
	})
	if err != nil {
		return fmt.Errorf("monitor did not start: %w (log %s)", err, m.log)
	}
	if f.cfg.FastFailover {
		return f.fastFailover(ctx)
	}
	return nil
}

// fastSettings are the monitor's timings under FastFailover: a node is
// checked every second and judged unhealthy after 2 s of failed checks, and
// a lost primary is given 3 s to demote itself before the standby takes
// writes. The defaults are 5 s checks, 20 s and 30 s.
var fastSettings = map[string]string{
	"pgautofailover.health_check_period":               "1000",
	"pgautofailover.health_check_timeout":              "1000",
	"pgautofailover.health_check_max_retries":          "1",
	"pgautofailover.health_check_retry_delay":          "500",
	"pgautofailover.node_considered_unhealthy_timeout": "2000",
	"pgautofailover.primary_demote_timeout":            "3000",
	"pgautofailover.startup_grace_period":              "2000",
}

func (f *Formation) fastFailover(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, f.MonitorURL())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for k, v := range fastSettings {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER SYSTEM SET %s = %s`, k, v)); err != nil {
			return fmt.Errorf("monitor: %s: %w", k, err)
		}
	}
	_, err = conn.Exec(ctx, `SELECT pg_reload_conf()`)
	return err
}

// createArgs are the pg_autoctl arguments that create node n and run its
// keeper.
func (f *Formation) createArgs(n *Node) []string {
	return []string{"create", "postgres", "--pgdata", n.data, "--pgport", strconv.Itoa(n.port), "--hostname", "127.0.0.1",
		"--listen", "127.0.0.1", "--name", n.name, "--dbname", f.cfg.DBName, "--auth", "trust", "--no-ssl",
		"--pgctl", filepath.Join(f.cfg.Bin, "pg_ctl"), "--monitor", f.monitorNodeURL(), "--run"}
}

// MonitorURL connects to the monitor's database as user postgres.
func (f *Formation) MonitorURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.cfg.Ports[0])
}

func (f *Formation) monitorNodeURL() string {
	return fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.cfg.Ports[0])
}

// Nodes are the formation's PostgreSQL nodes, node1 first.
func (f *Formation) Nodes() []*Node { return f.nodes }

// Dir is the formation's directory.
func (f *Formation) Dir() string { return f.cfg.Dir }

// Close stops every keeper and its PostgreSQL (fast shutdown), the nodes
// before the monitor, and removes what lost nodes left behind. It does not
// remove the directory.
func (f *Formation) Close(ctx context.Context) {
	for _, n := range f.nodes {
		n.stop(ctx)
	}
	if f.monitor != nil {
		f.monitor.stop(ctx)
	}
}

// Name is the node's name in the formation (node1, node2...).
func (n *Node) Name() string { return n.name }

// Port is the node's PostgreSQL port on 127.0.0.1.
func (n *Node) Port() int { return n.port }

// Log is the node's pg_autoctl log, which includes PostgreSQL's.
func (n *Node) Log() string { return n.log }

// URL connects to database db on this node alone, as user postgres.
func (n *Node) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.port, db)
}

// Running reports whether the node's keeper runs.
func (n *Node) Running() bool {
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// errStop, wrapped by an error of poll's try, ends the polling at once.
var errStop = errors.New("gave up")

// poll calls try until it returns nil, every 200 ms, for at most limit, or
// until it fails with errStop.
func poll(ctx context.Context, limit time.Duration, try func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
		err := try(tctx)
		tcancel()
		if err == nil || errors.Is(err, errStop) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %w", limit, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
