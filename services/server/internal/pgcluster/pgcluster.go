// Package pgcluster runs a private PostgreSQL cluster from the machine's
// own server binaries (initdb, pg_ctl): for bothy dev when no server runs,
// and for tests that must crash PostgreSQL without touching a shared server.
//
// PostgreSQL refuses to run as root; as root the cluster runs as the
// postgres user, which then owns its directory.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/bothy/bothy/internal/pgbin"
)

// Config says where a cluster lives and how it runs.
type Config struct {
	// Dir holds the data directory (Dir/pgdata) and the server log
	// (Dir/postgres.log). Required.
	Dir string
	// Bin is the folder with initdb and pg_ctl. Default: pgbin.Server.
	Bin string
	// Port to listen on (127.0.0.1 only). Default: a free port.
	Port int
	// Settings are passed to the server as -c name=value, e.g.
	// wal_writer_delay. Default none.
	Settings map[string]string
}

// Cluster is one private cluster. Its methods are not safe for concurrent
// use.
type Cluster struct {
	bin, dir, data, logFile string
	port                    int
	settings                map[string]string
	cred                    *syscall.Credential
}

// New creates the cluster's data directory unless it exists (initdb with
// trust authentication for user postgres). It does not start it.
func New(ctx context.Context, cfg *Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("pgcluster: Config.Dir is required")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	bin := cfg.Bin
	if bin == "" {
		if bin, err = pgbin.Server(); err != nil {
			return nil, err
		}
	}
	c := &Cluster{bin: bin, dir: dir, data: filepath.Join(dir, "pgdata"), logFile: filepath.Join(dir, "postgres.log"),
		port: cfg.Port, settings: cfg.Settings}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, errors.New("pgcluster: running as root, and there is no postgres user to run PostgreSQL as (initdb refuses root)")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(c.data, "PG_VERSION")); err == nil {
		return c, nil
	}
	if b, err := c.cmd(ctx, "initdb", "-D", c.data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--no-instructions", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, lastLines(b))
	}
	return c, nil
}

// Start starts the server and waits until it accepts connections. A server
// left running in the directory by a killed process is stopped first. The
// port is chosen on the first start and kept for later ones.
func (c *Cluster) Start(ctx context.Context) error {
	if c.cmd(ctx, "pg_ctl", "-D", c.data, "status").Run() == nil {
		_ = c.Stop(ctx)
	}
	if c.port == 0 || !portFree(c.port) {
		p, err := FreePort()
		if err != nil {
			return err
		}
		c.port = p
	}
	opts := []string{"-p", strconv.Itoa(c.port), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=''"}
	names := make([]string, 0, len(c.settings))
	for k := range c.settings {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		// pg_ctl hands -o to a shell: each setting goes quoted, so values
		// with spaces or shell characters (a log_line_prefix) arrive whole.
		opts = append(opts, "-c", shellQuote(k+"="+c.settings[k]))
	}
	if b, err := c.cmd(ctx, "pg_ctl", "-D", c.data, "-l", c.logFile, "-o", strings.Join(opts, " "),
		"-w", "-t", "120", "start").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl start: %v: %s (see %s)", err, lastLines(b), c.logFile)
	}
	return nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Stop shuts the server down cleanly (fast mode: sessions are ended, a
// checkpoint is written).
func (c *Cluster) Stop(ctx context.Context) error {
	return c.pgctlStop(ctx, "fast")
}

// Crash stops the server in immediate mode: no checkpoint, and WAL still in
// PostgreSQL's buffers is lost, as in a crash of the server process. The
// next Start recovers from the WAL on disk.
func (c *Cluster) Crash(ctx context.Context) error {
	return c.pgctlStop(ctx, "immediate")
}

func (c *Cluster) pgctlStop(ctx context.Context, mode string) error {
	if b, err := c.cmd(ctx, "pg_ctl", "-D", c.data, "-m", mode, "-w", "-t", "120", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %v: %s", mode, err, lastLines(b))
	}
	return nil
}

// Port is the port the server listens on (known after the first Start).
func (c *Cluster) Port() int { return c.port }

// PID is the process id of the running server's postmaster, which every
// other server process is a child of (read from postmaster.pid).
func (c *Cluster) PID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgcluster: is the server running? %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pgcluster: postmaster.pid: no process id on its first line")
	}
	return pid, nil
}

// Data is the cluster's data directory.
func (c *Cluster) Data() string { return c.data }

// LogFile is the server's log.
func (c *Cluster) LogFile() string { return c.logFile }

// URL is the connection URL of database db as user postgres.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// cmd runs a server binary as the cluster's owner, in its own process
// group, so a terminal's Ctrl-C reaches only the caller, which stops the
// cluster itself. The command outlives ctx's cancellation: stopping must
// still work during shutdown.
func (c *Cluster) cmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(context.WithoutCancel(ctx), filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	return cmd
}

func portFree(port int) bool {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// lastLines returns the last three lines of a command's output, joined, for
// error messages.
func lastLines(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " / ")
}

// QuietCrashSettings returns settings under which a cluster keeps
// asynchronously committed WAL in its buffers for as long as PostgreSQL
// allows (wal_writer_delay's maximum is 10 s) and does nothing in the
// background that would flush it early (autovacuum, checkpoints, the
// background writer), so an immediate stop loses every commit that nobody
// flushed. Note that wal_writer_flush_after 0 would mean "flush at once".
// Callers add or override entries, such as shared_buffers.
func QuietCrashSettings() map[string]string {
	return map[string]string{
		"wal_writer_delay":       "10s",
		"wal_writer_flush_after": "1GB",
		"bgwriter_lru_maxpages":  "0",
		"autovacuum":             "off",
		"checkpoint_timeout":     "1h",
		"max_wal_size":           "4GB",
		"fsync":                  "on",
		"synchronous_commit":     "on",
		"log_min_messages":       "warning",
		"log_checkpoints":        "off",
		"log_connections":        "off",
		"log_disconnections":     "off",
	}
}
