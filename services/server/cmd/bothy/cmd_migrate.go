package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbmigrate"
)

func init() {
	register(command{Name: "migrate up", Summary: "apply pending migrations (River's and bothy's), creating the database if missing", Setup: setupMigrateUp})
	register(command{Name: "migrate status", Summary: "list applied and pending migrations; exit 1 if any are pending or an applied one was edited", Setup: setupMigrateStatus})
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

func setupMigrateUp(fs *pflag.FlagSet) func(context.Context, *call) error {
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
// "applied 5 migrations: 0001_baseline … 0005_push_topics (River: 1..6)".
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
		return nil, explainConnect(cfg.Database.URL, err)
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
	// Edited, Missing and OutOfOrder make every command refuse the
	// database; Newer is a binary older than the schema (a rollback).
	Edited     []migrationJSON `json:"edited"`
	Missing    []migrationJSON `json:"missing"`
	OutOfOrder []migrationJSON `json:"out_of_order"`
	Newer      []migrationJSON `json:"newer"`
}

func recordsJSON(rs []dbmigrate.Record) []migrationJSON {
	out := []migrationJSON{}
	for _, r := range rs {
		out = append(out, migrationJSON{Version: r.Version, Name: r.Name})
	}
	return out
}

func setupMigrateStatus(fs *pflag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		cfg, err := c.config()
		if err != nil {
			return err
		}
		pool, err := app.OpenPool(ctx, cfg)
		if err != nil {
			return explainConnect(cfg.Database.URL, err)
		}
		defer pool.Close()
		st, err := dbmigrate.GetStatus(ctx, pool)
		if err != nil {
			return err
		}
		if *asJSON {
			if err := c.printJSON(statusJSON(st)); err != nil {
				return err
			}
		} else {
			printStatus(c.stdout, st)
		}
		if err := st.Check(); err != nil {
			return err
		}
		if !st.Current() {
			return fmt.Errorf("migrations pending (river %d of %d, bothy %d): run bothy migrate up", st.RiverCurrent, st.RiverLatest, len(st.Pending))
		}
		return nil
	}
}

func statusJSON(st *dbmigrate.Status) migrateStatusJSON {
	out := migrateStatusJSON{Current: st.Current(), RiverCurrent: st.RiverCurrent, RiverLatest: st.RiverLatest,
		Applied: migrationsJSON(st.Applied), Pending: migrationsJSON(st.Pending), Missing: recordsJSON(st.Missing),
		OutOfOrder: migrationsJSON(st.OutOfOrder), Newer: recordsJSON(st.Newer), Edited: []migrationJSON{}}
	for _, e := range st.Edited {
		out.Edited = append(out.Edited, migrationJSON{Version: e.File.Version, Name: e.File.Name})
	}
	return out
}

// printStatus lists the migrations one a line, in version order within
// each state: "applied  0001_baseline".
func printStatus(w io.Writer, st *dbmigrate.Status) {
	fmt.Fprintf(w, "river    %d of %d\n", st.RiverCurrent, st.RiverLatest)
	edited := map[int]bool{}
	for _, e := range st.Edited {
		edited[e.File.Version] = true
	}
	for _, m := range st.Applied {
		state := "applied"
		if edited[m.Version] {
			state = "edited" // applied, but the binary's file is not what ran
		}
		fmt.Fprintf(w, "%-8s %s\n", state, migrationName(m))
	}
	for _, r := range st.Missing {
		fmt.Fprintf(w, "missing  %04d_%s (applied; this binary has no such file)\n", r.Version, r.Name)
	}
	for _, m := range st.Pending {
		fmt.Fprintf(w, "pending  %s\n", migrationName(m))
	}
	for _, r := range st.Newer {
		fmt.Fprintf(w, "newer    %04d_%s (applied by a newer release)\n", r.Version, r.Name)
	}
}

// explainConnect turns a failure to open the database into what to do
// about it: create the database, start the server, fix the credentials.
// Other errors pass unchanged.
func explainConnect(dbURL string, err error) error {
	pc, perr := pgconn.ParseConfig(dbURL)
	if perr != nil {
		return err
	}
	at := net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port)))
	var pgErr *pgconn.PgError
	var netErr net.Error
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "3D000": // invalid_catalog_name
		return fmt.Errorf("database %q does not exist on %s; create it and its schema with\n"+
			"    bothy migrate up\n"+
			"(it creates the database when user %q may create databases; otherwise first: createdb -h %s -p %d -U %s %s)",
			pc.Database, at, pc.User, pc.Host, pc.Port, pc.User, pc.Database)
	case errors.As(err, &pgErr) && (pgErr.Code == "28000" || pgErr.Code == "28P01"): // authentication
		return fmt.Errorf("PostgreSQL at %s refused user %q: %s; fix the user or password in database.url", at, pc.User, pgErr.Message)
	case errors.As(err, &pgErr):
		return err
	case errors.As(err, &netErr):
		err = netErr
		fallthrough
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no PostgreSQL answers at %s (database.url): %w\n"+
			"start it, or point database.url (BOTHY_DATABASE_URL) at a running server; then bothy migrate up creates the database and its schema", at, err)
	}
	return err
}
