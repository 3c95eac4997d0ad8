package main

import (
	"context"
	"fmt"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/dbmigrate"
)

func init() {
	register(command{Name: "migrate up", Summary: "apply pending migrations (River's and bothy's)", Run: runMigrateUp})
	register(command{Name: "migrate status", Summary: "list applied and pending migrations", Run: runMigrateStatus})
}

func runMigrateUp(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("migrate up", e)
	load := configFlags(fs, e)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := load()
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if err := app.Migrate(ctx, cfg, newLogger(cfg, e.stderr)); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "migrations are current")
	return nil
}

func runMigrateStatus(ctx context.Context, e *env, args []string) error {
	_, pool, _, err := dbCommand(ctx, e, "migrate status", args, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := dbmigrate.GetStatus(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "river    %d of %d\n", st.RiverCurrent, st.RiverLatest)
	for _, m := range st.Applied {
		fmt.Fprintf(e.stdout, "applied  %04d_%s\n", m.Version, m.Name)
	}
	for _, m := range st.Pending {
		fmt.Fprintf(e.stdout, "pending  %04d_%s\n", m.Version, m.Name)
	}
	if !st.Current() {
		return fmt.Errorf("migrations pending (river %d of %d, bothy %d): run bothy migrate up", st.RiverCurrent, st.RiverLatest, len(st.Pending))
	}
	return nil
}
