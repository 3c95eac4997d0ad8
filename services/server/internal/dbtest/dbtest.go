// Package dbtest gives each test its own freshly migrated PostgreSQL
// database, cloned from a template that is migrated once per schema version,
// so tests can run in parallel and never see each other's rows.
//
// The server comes from BOTHY_TEST_DATABASE_URL, else the local server at
// 127.0.0.1:5432 (user postgres), else a container started through
// testcontainers; with none of these the test fails with one line saying how
// to provide a database.
package dbtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	gosync "sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/bothy/bothy/services/server/internal/dbconn"
	"github.com/bothy/bothy/services/server/internal/dbmigrate"
	"github.com/bothy/bothy/services/server/internal/dburl"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// EnvURL names the variable that points tests at a server.
const EnvURL = "BOTHY_TEST_DATABASE_URL"

// DefaultURL is used when EnvURL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	serverOnce gosync.Once
	serverURL  string
	serverErr  error

	templateMu   gosync.Mutex
	templateName string
)

// ServerURL returns the admin URL of the test server, starting a container
// if needed. It fails the test when no server can be had.
func ServerURL(tb testing.TB) string {
	tb.Helper()
	serverOnce.Do(func() { serverURL, serverErr = findServer() })
	if serverErr != nil {
		tb.Fatalf("dbtest: %v", serverErr)
	}
	return serverURL
}

func findServer() (string, error) {
	u := os.Getenv(EnvURL)
	if u == "" {
		u = DefaultURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	firstErr := ping(ctx, u)
	if firstErr == nil {
		return u, nil
	}
	if os.Getenv(EnvURL) != "" {
		return "", fmt.Errorf("%s=%s is not reachable: %v", EnvURL, redact(u), firstErr)
	}
	cu, err := startContainer()
	if err != nil {
		return "", fmt.Errorf("no PostgreSQL for tests: %s unreachable (%v) and testcontainers failed (%v); "+
			"start PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth) or set %s=postgres://user:pass@host:port/db",
			redact(u), firstErr, err, EnvURL)
	}
	return cu, nil
}

func startContainer() (u string, err error) {
	defer func() {
		if p := recover(); p != nil { // testcontainers panics without Docker on some hosts
			err = fmt.Errorf("%v", p)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(ctx, "postgres:16-alpine", tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"), tcpostgres.BasicWaitStrategies())
	if err != nil {
		return "", err
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}

func ping(ctx context.Context, u string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

func redact(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return pu.Redacted()
}

// templateLockKey serializes template creation across test processes.
const templateLockKey int64 = 0x626f7468795f7470 // "bothy_tp"

// ensureTemplate creates, once per schema version, a migrated database that
// test databases are cloned from. Go test runs packages in parallel
// processes, so creation is guarded by an advisory lock, and the database is
// renamed into place only once it is complete.
func ensureTemplate(ctx context.Context, admin string) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if templateName != "" {
		return templateName, nil
	}
	migs, err := dbmigrate.Load()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range migs {
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", m.Version, m.Name, m.SQL)
	}
	fmt.Fprintf(h, "river-v0.51.2\x00history-%d", dbmigrate.HistoryVersion)
	name := "bothy_tpl_" + hex.EncodeToString(h.Sum(nil))[:16]

	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, templateLockKey); err != nil {
		return "", err
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, templateLockKey) //nolint:errcheck
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		tmp := name + "_tmp"
		if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{tmp}.Sanitize()+` WITH (FORCE)`); err != nil {
			return "", err
		}
		if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{tmp}.Sanitize()); err != nil {
			return "", err
		}
		tmpURL, err := dburl.WithDatabase(admin, tmp)
		if err != nil {
			return "", err
		}
		pool, err := pgxpool.New(ctx, tmpURL)
		if err != nil {
			return "", err
		}
		_, err = dbmigrate.Up(ctx, pool)
		pool.Close()
		if err != nil {
			return "", fmt.Errorf("migrate template: %w", err)
		}
		if _, err := conn.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{tmp}.Sanitize()+` RENAME TO `+pgx.Identifier{name}.Sanitize()); err != nil {
			return "", err
		}
	}
	templateName = name
	return name, nil
}

// DB is a test's own database.
type DB struct {
	// Pool is connected to the database.
	Pool *pgxpool.Pool
	// URL connects to it (for processes and dedicated connections).
	URL string
	// Name of the database.
	Name string
}

// NewDB creates a migrated database for tb, with event_log partitions for
// now, and drops it when tb ends (see Background).
func NewDB(tb testing.TB) *DB {
	tb.Helper()
	admin := ServerURL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tpl, err := ensureTemplate(ctx, admin)
	if err != nil {
		tb.Fatalf("dbtest: template: %v", err)
	}
	name, ok := takeSpare(admin, tpl)
	if !ok {
		if name, err = create(admin, tpl); err != nil {
			tb.Fatalf("dbtest: create database: %v", err)
		}
	}
	tb.Cleanup(func() { dropLater(admin, name) })
	u, err := dburl.WithDatabase(admin, name)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	pc, err := pgxpool.ParseConfig(u)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	pc.MaxConns = 16 // the default (4 on this machine) starves concurrent producers and River
	dbconn.RegisterTypes(pc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	tb.Cleanup(pool.Close)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := postgres.EnsurePartitions(ctx, tx, time.Now(), 24*time.Hour, 2)
		return err
	})
	if err != nil {
		tb.Fatalf("dbtest: partitions: %v", err)
	}
	return &DB{Pool: pool, URL: u, Name: name}
}

// createFromTemplate retries while another session briefly holds the
// template (PostgreSQL refuses to copy a database others are connected to).
func createFromTemplate(ctx context.Context, conn *pgx.Conn, name, tpl string) error {
	for {
		_, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()+` TEMPLATE `+pgx.Identifier{tpl}.Sanitize())
		var pgErr interface{ SQLState() string }
		if err == nil || !errors.As(err, &pgErr) || pgErr.SQLState() != "55006" {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}
