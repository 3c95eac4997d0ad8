package main

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/app"
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
		return app.NewServer(cfg, newLogger(cfg, c.stderr), app.Features(cfg)).Run(ctx)
	}
}
