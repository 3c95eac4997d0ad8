package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbconn"
	"github.com/bothy/bothy/services/server/internal/dbmigrate"
	"github.com/bothy/bothy/services/server/internal/dburl"
)

// Migrate creates the configured database if it does not exist (a newcomer
// needs nothing but a running PostgreSQL), then applies pending migrations
// and creates the event_log partitions for now.
func Migrate(ctx context.Context, cfg *config.Config, logger *slog.Logger) error {
	if err := createDatabase(ctx, cfg.Database.URL, logger); err != nil {
		return err
	}
	pool, err := OpenPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := dbmigrate.Up(ctx, pool)
	// What a failed run applied before the failing file stays applied.
	logMigrated(ctx, logger, res)
	if err != nil {
		return err
	}
	return ensurePartitions(ctx, pool, cfg)
}

func logMigrated(ctx context.Context, logger *slog.Logger, res *dbmigrate.Result) {
	if res == nil {
		return
	}
	for _, v := range res.RiverApplied {
		logger.InfoContext(ctx, "applied river migration", slog.Int("version", v))
	}
	for _, name := range res.DroppedInvalid {
		logger.WarnContext(ctx, "dropped an invalid index left by a failed concurrent build, to build it again", slog.String("index", name))
	}
	for _, m := range res.Applied {
		logger.InfoContext(ctx, "applied migration", slog.Int("version", m.Version), slog.String("name", m.Name))
	}
}

func createDatabase(ctx context.Context, dbURL string, logger *slog.Logger) error {
	admin, err := dburl.WithDatabase(dbURL, "postgres")
	if err != nil {
		return fmt.Errorf("database.url: %w", err)
	}
	name := dburl.Name(dbURL)
	if name == "" || name == "postgres" {
		return nil
	}
	// Bounded as every connect of bothy's is: a host that does not answer
	// must not hold a starting server before it can report and wait.
	cctx, cancel := context.WithTimeout(ctx, dbconn.ConnectTimeout)
	defer cancel()
	conn, err := pgx.Connect(cctx, admin)
	if err != nil {
		return nil // no maintenance database access: let the real connect report the problem
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil || exists {
		return nil
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		var pgErr interface{ SQLState() string }
		if errors.As(err, &pgErr) && pgErr.SQLState() == "42P04" {
			return nil // another process created it a moment ago
		}
		return fmt.Errorf("create database %q: %w", name, err)
	}
	logger.InfoContext(ctx, "created database", slog.String("name", name))
	return nil
}
