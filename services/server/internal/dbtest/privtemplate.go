package dbtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	gosync "sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/dbmigrate"
	"github.com/bothy/bothy/services/server/internal/pgcluster"
	"github.com/bothy/bothy/services/server/internal/testsweep"
)

// A private cluster starts as a copy of a data directory made once per
// package (initdb, database "bothy" migrated, a clean stop) when the
// package runs under Background, which removes it once the tests are done:
// initdb and the migrations take longer than the copy. Elsewhere every
// private cluster is made from scratch.

var privTpl struct {
	mu   gosync.Mutex
	dir  string // holds pgdata, the template's data directory; "" until made
	err  error  // why it could not be made; then clusters are made from scratch
	done bool
}

// copyPrivateTemplate copies the template's data directory to dir/pgdata
// and reports whether it did; pgcluster.New then finds a data directory
// and runs no initdb.
func copyPrivateTemplate(ctx context.Context, dir string) bool {
	bg.mu.Lock()
	on := bg.on
	bg.mu.Unlock()
	if !on {
		return false
	}
	tpl, err := privateTemplate(ctx)
	if err != nil {
		return false
	}
	// cp -a keeps the owner (the postgres user when the tests run as root)
	// and the data directory's mode, which PostgreSQL checks.
	if err := exec.CommandContext(ctx, "cp", "-a", tpl, filepath.Join(dir, "pgdata")).Run(); err != nil {
		_ = os.RemoveAll(filepath.Join(dir, "pgdata"))
		return false
	}
	return true
}

// privateTemplate returns the template's data directory, making it on
// first use.
func privateTemplate(ctx context.Context) (string, error) {
	privTpl.mu.Lock()
	defer privTpl.mu.Unlock()
	if !privTpl.done {
		privTpl.done = true
		privTpl.dir, privTpl.err = makePrivateTemplate(ctx)
	}
	if privTpl.err != nil {
		return "", privTpl.err
	}
	return filepath.Join(privTpl.dir, "pgdata"), nil
}

func makePrivateTemplate(ctx context.Context) (string, error) {
	dir, err := testsweep.MkdirTemp("bothy-pgtpl-")
	if err != nil {
		return "", err
	}
	// No autovacuum, as under QuietCrashSettings: the copy holds the dead
	// catalog rows the migrations leave, as a cluster made from scratch.
	c, err := pgcluster.New(ctx, &pgcluster.Config{Dir: dir, Settings: map[string]string{"autovacuum": "off"}})
	if err == nil {
		if err = c.Start(ctx); err == nil {
			err = createBothy(ctx, c)
			if serr := c.Stop(context.WithoutCancel(ctx)); err == nil {
				err = serr
			}
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("private cluster template: %w", err)
	}
	return dir, nil
}

// removePrivateTemplate removes the template, once the package's tests
// are done.
func removePrivateTemplate() {
	privTpl.mu.Lock()
	defer privTpl.mu.Unlock()
	if privTpl.dir != "" {
		_ = os.RemoveAll(privTpl.dir)
		privTpl.dir, privTpl.done = "", false
	}
}

// createBothy creates database "bothy" in the running cluster c and
// migrates it.
func createBothy(ctx context.Context, c *pgcluster.Cluster) error {
	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, `CREATE DATABASE bothy`); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, c.URL("bothy"))
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := dbmigrate.Up(ctx, pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
