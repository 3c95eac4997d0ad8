package main

import (
	"context"
	"fmt"

	"github.com/bothy/bothy/services/server/internal/app"
)

// modules are the features plugged into every server; a new consumer adds
// its factory here and a migration for its cursor.
var modules []app.ModuleFactory

func init() {
	register(command{Name: "server", Summary: "run a role: --role=api|worker|all", Run: runServer})
}

func runServer(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("server", e)
	role := fs.String("role", "", "api, worker or all (same as --server.role)")
	migrate := fs.Bool("migrate", false, "apply migrations before starting (same as --server.migrate=true)")
	load := configFlags(fs, e)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *role != "" {
		if err := fs.Set("server.role", *role); err != nil {
			return err
		}
	}
	if *migrate {
		if err := fs.Set("server.migrate", "true"); err != nil {
			return err
		}
	}
	cfg, err := load()
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger := newLogger(cfg, e.stderr)
	return app.NewServer(cfg, logger, modules).Run(ctx)
}
