package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Backends tells the CPU time of a PostgreSQL server's processes apart by
// whom they serve: every connection of bothy's names its role in
// application_name ("bothy-api-<pid>", "bothy-worker-<pid>-listen", ...),
// and a backend serves one connection for its life. It samples
// pg_stat_activity and each backend's /proc/<pid>/schedstat (nanoseconds
// on the CPU; a backend is one thread) until its context ends, so a
// backend that exits between samples loses at most one interval of its
// time to "gone". The server must run on this machine.
type Backends struct {
	// connMu serializes the use of conn; mu guards the maps.
	connMu gosync.Mutex
	conn   *pgx.Conn
	mu     gosync.Mutex
	// first and last are each backend's CPU time at its first and last
	// sample; class its role.
	first, last map[int]time.Duration
	class       map[int]string
	// started says Start was called: a backend first seen later began
	// within the window and counts from 0.
	started bool
}

// OpenBackends connects to the server at adminURL to sample its backends.
func OpenBackends(ctx context.Context, adminURL string) (*Backends, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("backends: connect: %w", err)
	}
	return &Backends{conn: conn, first: map[int]time.Duration{}, last: map[int]time.Duration{}, class: map[int]string{}}, nil
}

// Class is the part of bothy an application_name belongs to: "api",
// "worker" or "all" for bothy's roles, "postgres" for the server's own
// processes (autovacuum, checkpointer, WAL writer, ...), and "other" for
// the rest (the load test's own sessions).
func Class(applicationName, backendType string) string {
	if rest, ok := strings.CutPrefix(applicationName, "bothy-"); ok {
		role, _, _ := strings.Cut(rest, "-")
		return role
	}
	if backendType != "client backend" {
		return "postgres"
	}
	return "other"
}

// Run samples every interval until ctx ends, and once more then.
func (b *Backends) Run(ctx context.Context, interval time.Duration) error {
	for {
		if err := b.Sample(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// Sample reads every backend's CPU time once. It is safe for concurrent
// use with Run.
func (b *Backends) Sample(ctx context.Context) error {
	b.connMu.Lock()
	defer b.connMu.Unlock()
	rows, err := b.conn.Query(ctx, `SELECT pid, coalesce(application_name, ''), coalesce(backend_type, '') FROM pg_stat_activity`)
	if err != nil {
		return fmt.Errorf("backends: pg_stat_activity: %w", err)
	}
	type backend struct {
		pid       int
		app, kind string
	}
	var seen []backend
	var bk backend
	if _, err := pgx.ForEachRow(rows, []any{&bk.pid, &bk.app, &bk.kind}, func() error {
		seen = append(seen, bk)
		return nil
	}); err != nil {
		return fmt.Errorf("backends: pg_stat_activity: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range seen {
		cpu, err := schedCPU(s.pid)
		if err != nil {
			continue // it exited meanwhile
		}
		if _, ok := b.first[s.pid]; !ok {
			b.first[s.pid] = cpu
			if b.started {
				b.first[s.pid] = 0
			}
			b.class[s.pid] = Class(s.app, s.kind)
		}
		b.last[s.pid] = cpu
	}
	return nil
}

// Start opens the window: what the backends seen so far used before their
// last sample does not count, and backends first seen later count from 0.
func (b *Backends) Start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.started = true
	for pid, cpu := range b.last {
		b.first[pid] = cpu
	}
}

// ByClass is the CPU time each class used in the window, from Start to
// each backend's last sample.
func (b *Backends) ByClass() map[string]time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]time.Duration{}
	for pid, last := range b.last {
		out[b.class[pid]] += last - b.first[pid]
	}
	return out
}

// Close closes the connection.
func (b *Backends) Close(ctx context.Context) { _ = b.conn.Close(context.WithoutCancel(ctx)) }

// schedCPU is the time a single-threaded process has spent on the CPU:
// the first field of /proc/<pid>/schedstat, in nanoseconds.
func schedCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "schedstat"))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/%d/schedstat: empty", pid)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns), err
}
