package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bothy/bothy/services/server/internal/pgformation"
)

// startDevFormation starts a pg_auto_failover formation (monitor, primary,
// synchronous standby) in dir/ha, made anew on every run, with the
// monitor's fast timings, so that a user can lose the primary and watch
// bothy go on: SIGUSR1 to bothy dev loses the current primary as when its
// machine dies, and a lost node rejoins as the standby once the other took
// over. Stopping the returned database stops all of it and removes the
// directory.
func startDevFormation(ctx context.Context, dir string, out io.Writer) (*devDatabase, error) {
	haDir, err := filepath.Abs(filepath.Join(dir, "ha"))
	if err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if err := openDevDir(filepath.Dir(haDir), out); err != nil {
			return nil, err
		}
	}
	if err := os.RemoveAll(haDir); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "bothy dev: starting a pg_auto_failover formation (monitor, primary, synchronous standby) in %s ...\n", haDir)
	f, err := pgformation.New(ctx, &pgformation.Config{Dir: haDir, FastFailover: true, DBName: devDBName})
	if err != nil {
		if ue := new(pgformation.UnreachableError); errors.As(err, &ue) {
			return nil, fmt.Errorf("--ha: %w (--dir DIR)", err)
		}
		return nil, fmt.Errorf("--ha: %w", err)
	}
	url, err := f.URL(ctx)
	if err != nil {
		f.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("--ha: %w", err)
	}
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchDevFormation(wctx, f, out)
	}()
	stop := func(sctx context.Context) error {
		stopWatch()
		<-watched
		f.Close(sctx)
		return os.RemoveAll(haDir)
	}
	return &devDatabase{url: url, stop: stop, ha: devFormationUsage(f),
		what: fmt.Sprintf("pg_auto_failover formation in %s (logs: %s)", haDir, filepath.Join(haDir, "*.log"))}, nil
}

// devDirEntries are what bothy dev puts in its directory: the formation
// (--ha) and the private cluster's data and log.
var devDirEntries = []string{"ha", "pgdata", "postgres.log"}

// openDevDir lets others search dir, bothy dev's directory, when it is
// private to root and holds nothing but what bothy dev puts there (an
// earlier run made it so): PostgreSQL runs as the postgres user, which
// must pass through it. Any other directory is left as it is; if it is
// out of the postgres user's reach, pgformation refuses it saying what to
// do. A missing dir is pgformation's to create.
func openDevDir(dir string, out io.Writer) error {
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm()&0o001 != 0 {
		return nil
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Geteuid() {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return err
	}
	for _, e := range entries {
		if !slices.Contains(devDirEntries, e.Name()) {
			return nil
		}
	}
	mode := st.Mode().Perm() | 0o011
	if err := os.Chmod(dir, mode); err != nil {
		return err
	}
	fmt.Fprintf(out, "bothy dev: %s: mode %04o, so that PostgreSQL, which runs as the postgres user, can pass through it\n", dir, mode)
	return nil
}

// devFormationUsage tells how to watch the formation and lose its primary.
func devFormationUsage(f *pgformation.Formation) string {
	return fmt.Sprintf(`PostgreSQL is a pg_auto_failover formation with a synchronous standby (ops/high-availability.md).
Watch it, lose its primary as when its machine dies, and append events meanwhile (503 during the
switch, 201 again a few seconds after; the receiver goes on printing):

  %s
  kill -USR1 %d      (bothy dev SIGKILLs the primary's keeper and PostgreSQL; the node rejoins as the standby)

`, f.ShellLine("show", "state", "--pgdata", f.MonitorData()), os.Getpid())
}

// watchDevFormation loses the primary on SIGUSR1 and brings a lost node
// back as a standby once another node took writes, until ctx ends.
func watchDevFormation(ctx context.Context, f *pgformation.Formation, out io.Writer) {
	lose := make(chan os.Signal, 1)
	signal.Notify(lose, syscall.SIGUSR1)
	defer signal.Stop(lose)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lose:
			if p, err := f.Primary(ctx); err == nil {
				fmt.Fprintf(out, "bothy dev: losing the primary %s (port %d)\n", p.Name(), p.Port())
				if err := p.Kill(ctx); err != nil {
					fmt.Fprintf(out, "bothy dev: %v\n", err)
				}
			}
		case <-tick.C:
			rejoinLost(ctx, f, out)
		}
	}
}

// rejoinLost brings back each node whose keeper is gone, once another node
// took writes, and waits until the formation is whole again.
func rejoinLost(ctx context.Context, f *pgformation.Formation, out io.Writer) {
	for _, n := range f.Nodes() {
		if n.Running() {
			continue
		}
		p, err := f.Primary(ctx)
		if err != nil || p == n {
			return // not promoted yet
		}
		at, err := p.WaitWritable(ctx, time.Minute)
		if err != nil {
			return
		}
		fmt.Fprintf(out, "bothy dev: %s takes writes since %s; %s rejoins as the standby\n", p.Name(), at.Format(time.TimeOnly), n.Name())
		if err := n.Rejoin(); err != nil {
			fmt.Fprintf(out, "bothy dev: %v\n", err)
			return
		}
		if err := f.Wait(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintf(out, "bothy dev: %s\n", strings.TrimSpace(err.Error()))
			return
		}
		fmt.Fprintf(out, "bothy dev: %s is the synchronous standby again\n", n.Name())
	}
}
