package main

import (
	"context"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/logbuf"
)

func init() {
	register(command{Name: "server", Summary: "run a role: the HTTP API (api), the consumers and jobs (worker) or both (all)", Setup: setupServer})
}

func setupServer(fs *pflag.FlagSet) func(context.Context, *call) error {
	role := fs.String("role", "", "api, worker or all (same as --server.role)")
	migrate := fs.Bool("migrate", false, "apply migrations before starting (same as --server.migrate=true)")
	return func(ctx context.Context, c *call) error {
		if *role != "" {
			if err := c.fs.Set("server.role", *role); err != nil {
				return err
			}
		}
		if *migrate {
			if err := c.fs.Set("server.migrate", "true"); err != nil {
				return err
			}
		}
		cfg, err := c.config()
		if err != nil {
			return err
		}
		// A server logs a line per request: its records go out in batches,
		// warnings and errors at once (package logbuf).
		out := logbuf.New(c.stderr, nil)
		defer func() { _ = out.Flush() }()
		logger := slog.New(logbuf.Handler(newLogger(cfg, out).Handler(), out, slog.LevelWarn))
		return app.NewServer(cfg, logger, app.Features(cfg)).Run(ctx)
	}
}
