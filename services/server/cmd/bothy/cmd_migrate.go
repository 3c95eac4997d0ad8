package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbmigrate"
)

func init() {
	register(command{Name: "migrate up", Summary: "apply pending migrations (River's and bothy's), creating the database if missing", Setup: setupMigrateUp})
	register(command{Name: "migrate status", Summary: "list applied and pending migrations; exit 1 if any are pending", Setup: setupMigrateStatus})
}

// migrationJSON is one of bothy's migrations in --json output.
type migrationJSON struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
}

func migrationsJSON(ms []dbmigrate.Migration) []migrationJSON {
	out := []migrationJSON{}
	for _, m := range ms {
		out = append(out, migrationJSON{Version: m.Version, Name: m.Name})
	}
	return out
}

func migrationName(m dbmigrate.Migration) string { return fmt.Sprintf("%04d_%s", m.Version, m.Name) }

// migrateUpJSON is what "bothy migrate up --json" prints.
type migrateUpJSON struct {
	Applied      []migrationJSON `json:"applied"`
	RiverApplied []int           `json:"river_applied"`
	RiverVersion int             `json:"river_version"`
}

func setupMigrateUp(fs *flag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		cfg, err := c.config()
		if err != nil {
			return err
		}
		// What was applied is the difference of the status before and
		// after; a database that does not exist yet has nothing applied.
		before, err := migrationStatus(ctx, cfg)
		if err != nil {
			return err
		}
		if err := app.Migrate(ctx, cfg, newLogger(cfg, c.stderr)); err != nil {
			return err
		}
		after, err := migrationStatus(ctx, cfg)
		if err != nil {
			return err
		}
		res := migrateUpJSON{Applied: []migrationJSON{}, RiverApplied: []int{}, RiverVersion: after.RiverCurrent}
		var applied []dbmigrate.Migration
		for _, m := range after.Applied {
			if !slices.ContainsFunc(before.Applied, func(b dbmigrate.Migration) bool { return b.Version == m.Version }) {
				applied = append(applied, m)
			}
		}
		res.Applied = append(res.Applied, migrationsJSON(applied)...)
		for v := before.RiverCurrent + 1; v <= after.RiverCurrent; v++ {
			res.RiverApplied = append(res.RiverApplied, v)
		}
		if *asJSON {
			return c.printJSON(res)
		}
		fmt.Fprintln(c.stdout, describeMigrateUp(applied, after, res.RiverApplied))
		return nil
	}
}

// describeMigrateUp says in one line what migrate up applied:
// "applied 16 migrations: 0001_event_log … 0016_push (River: 1..6)".
func describeMigrateUp(applied []dbmigrate.Migration, after *dbmigrate.Status, river []int) string {
	riverPart := fmt.Sprintf("River: already at %d", after.RiverCurrent)
	if len(river) > 0 {
		riverPart = fmt.Sprintf("River: %d..%d", river[0], river[len(river)-1])
	}
	if len(applied) == 0 && len(river) == 0 {
		newest := "none"
		if len(after.Applied) > 0 {
			newest = migrationName(after.Applied[len(after.Applied)-1])
		}
		return fmt.Sprintf("migrations are current: nothing to apply (bothy at %s, River at %d)", newest, after.RiverCurrent)
	}
	var names []string
	for _, m := range applied {
		names = append(names, migrationName(m))
	}
	list := strings.Join(names, ", ")
	if len(names) > 3 {
		list = names[0] + " … " + names[len(names)-1]
	}
	switch len(applied) {
	case 0:
		return fmt.Sprintf("applied no bothy migrations (%s)", riverPart)
	case 1:
		return fmt.Sprintf("applied 1 migration: %s (%s)", list, riverPart)
	}
	return fmt.Sprintf("applied %d migrations: %s (%s)", len(applied), list, riverPart)
}

// migrationStatus reads the database's migration status; a database that
// does not exist yet reports nothing applied.
func migrationStatus(ctx context.Context, cfg *config.Config) (*dbmigrate.Status, error) {
	pool, err := app.OpenPool(ctx, cfg)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name
		return &dbmigrate.Status{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	return dbmigrate.GetStatus(ctx, pool)
}

// migrateStatusJSON is what "bothy migrate status --json" prints.
type migrateStatusJSON struct {
	Current      bool            `json:"current"`
	RiverCurrent int             `json:"river_current"`
	RiverLatest  int             `json:"river_latest"`
	Applied      []migrationJSON `json:"applied"`
	Pending      []migrationJSON `json:"pending"`
}

func setupMigrateStatus(fs *flag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		st, err := dbmigrate.GetStatus(ctx, pool)
		if err != nil {
			return err
		}
		if *asJSON {
			err = c.printJSON(migrateStatusJSON{Current: st.Current(), RiverCurrent: st.RiverCurrent, RiverLatest: st.RiverLatest,
				Applied: migrationsJSON(st.Applied), Pending: migrationsJSON(st.Pending)})
			if err != nil {
				return err
			}
		} else {
			fmt.Fprintf(c.stdout, "river    %d of %d\n", st.RiverCurrent, st.RiverLatest)
			for _, m := range st.Applied {
				fmt.Fprintf(c.stdout, "applied  %s\n", migrationName(m))
			}
			for _, m := range st.Pending {
				fmt.Fprintf(c.stdout, "pending  %s\n", migrationName(m))
			}
		}
		if !st.Current() {
			return fmt.Errorf("migrations pending (river %d of %d, bothy %d): run bothy migrate up", st.RiverCurrent, st.RiverLatest, len(st.Pending))
		}
		return nil
	}
}
