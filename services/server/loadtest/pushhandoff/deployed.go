package pushhandoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	gosync "sync"
	"time"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dburl"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/loadtest/cost"
	"github.com/bothy/bothy/services/server/loadtest/deploy"
	shared "github.com/bothy/bothy/services/server/loadtest/harness"
)

// The deployment mode runs bothy as users do (package deploy): the built
// binary as an api process and worker processes, with the run's VAPID
// keys, on a private PostgreSQL cluster with PostgreSQL's defaults.
// Producers in a process of their own POST events over HTTP with a bearer
// token; the receiver process decrypts every message and reports it with
// its event's seq and its device.

// writer is the principal the HTTP producers append as.
const writer = "perf-writer"

// deployed is one deployment-mode run.
type deployed struct {
	opts    *options
	stdout  io.Writer
	budget  time.Duration
	private *shared.PrivateServer
	scratch *shared.Scratch
	vapid   push.VAPIDKeys
	rcv     *receiverProc
	d       *deploy.Deployment
	token   string
	// spaces are the producers' targets, in order; spaceOf is each
	// device's space (its principal reads that one only).
	spaces  []string
	spaceOf map[string]string

	mu gosync.Mutex
	// arrivals are the messages by their event's seq: when each device
	// got it (a device twice is a duplicate).
	arrivals map[int64][]arrival
}

// runDeployed runs the deployment mode.
func runDeployed(ctx context.Context, o *options, cfg *config.Config, stdout io.Writer, environ []string) (err error) {
	r := &deployed{opts: o, stdout: stdout, budget: cfg.Perf.PushHandoffP95, arrivals: map[int64][]arrival{}, spaceOf: map[string]string{}}
	defer r.close(ctx)
	if err := r.open(ctx, cfg, environ); err != nil {
		return err
	}
	if err := r.seed(ctx); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	admin, err := dburl.WithDatabase(r.scratch.URL, "postgres")
	if err != nil {
		return err
	}
	r.d, err = deploy.NewDeployment(ctx, &deploy.DeploymentParams{Bin: o.bin, Keys: r.serverKeys(), ConfigFile: o.config,
		Workers: o.workers, AdminURL: admin, Stdout: stdout})
	if err != nil {
		return err
	}
	defer func() { r.d.Close(ctx, o.keep || (err != nil && !errors.Is(err, ErrOverBudget))) }()
	res, err := r.measure(ctx)
	if err != nil {
		return err
	}
	return r.report(res)
}

// open makes the VAPID keys, starts the private cluster, and opens the
// scratch database on it.
func (r *deployed) open(ctx context.Context, cfg *config.Config, environ []string) error {
	o := r.opts
	var err error
	if r.vapid, err = push.GenerateVAPIDKeys(); err != nil {
		return err
	}
	r.private, err = shared.StartPrivate(ctx, &shared.PrivateParams{SharedURL: cfg.Database.URL, Keep: o.keep, Stdout: r.stdout,
		Defaults: true, Settings: o.pgSettings.Map()})
	if err != nil {
		return err
	}
	r.scratch, err = shared.OpenScratch(ctx, &shared.ScratchParams{Tool: "push_handoff", ConfigFile: o.config, Environ: environ,
		ServerURL: r.private.URL(), MaxConns: 8, Keep: o.keep, Stdout: r.stdout, Keys: r.vapidKeys()})
	return err
}

func (r *deployed) vapidKeys() map[string]string {
	return map[string]string{"push.vapid_public_key": r.vapid.Public, "push.vapid_private_key": r.vapid.Private}
}

// serverKeys are every bothy process's configuration: the scratch
// database, the run's VAPID keys, push services on loopback, warnings
// only.
func (r *deployed) serverKeys() map[string]string {
	keys := r.vapidKeys()
	keys["database.url"] = r.scratch.URL
	keys["push.allow_private_targets"] = "true"
	keys["log.level"] = "warn"
	return keys
}

// seed starts the receiver process with one device per principal, makes
// --fanout principals readers of each space and registers their devices
// in the database (as the API's registration does), and mints the
// producers' token: write on every space, scope events:write.
func (r *deployed) seed(ctx context.Context) error {
	o := r.opts
	names := deviceNames(o.devices / o.fanout * o.fanout)
	var err error
	if r.rcv, err = startReceiverProc(ctx, r.vapid.Public, names, r.arrived); err != nil {
		return err
	}
	for i, n := range names {
		if i%o.fanout == 0 {
			r.spaces = append(r.spaces, fmt.Sprintf("space-%04d", i/o.fanout))
		}
		r.spaceOf[n] = r.spaces[i/o.fanout]
	}
	if err := registerDevices(ctx, r.scratch.Pool, r.spaceOf, r.rcv.devices); err != nil {
		return err
	}
	r.token, err = deploy.WriterToken(ctx, r.scratch.Pool, writer, r.spaces)
	return err
}

// arrived records a message the receiver process decrypted.
func (r *deployed) arrived(a arrival) {
	r.mu.Lock()
	r.arrivals[a.seq] = append(r.arrivals[a.seq], a)
	r.mu.Unlock()
}

// close stops the receiver, drops the scratch database and stops the
// private cluster.
func (r *deployed) close(ctx context.Context) {
	if r.rcv != nil {
		r.rcv.stop()
	}
	if r.scratch != nil {
		r.scratch.Close(ctx)
	}
	if r.private != nil {
		r.private.Stop()
	}
}

// costs opens the meter's window before any bothy process runs: the run
// closes its own sessions on the scratch database first, so every
// transaction the window counts is the deployment's.
func (r *deployed) costs(ctx context.Context) (*cost.Meter, *deploy.Others, func(), error) {
	r.scratch.Disconnect()
	admin, err := dburl.WithDatabase(r.scratch.URL, "postgres")
	if err != nil {
		return nil, nil, nil, err
	}
	db, err := cost.OpenDatabase(ctx, admin, dburl.Name(r.scratch.URL))
	if err != nil {
		return nil, nil, nil, err
	}
	pm, err := r.private.PID()
	if err != nil {
		db.Close(ctx)
		return nil, nil, nil, err
	}
	m := cost.NewMeter(&cost.MeterParams{DB: db, Postmaster: pm, Receiver: r.rcv.pid(), ScratchURL: r.scratch.URL,
		RiverKind: push.DeliverArgs{}.Kind(), RiverKeeps: cost.RiverKeeps(app.RiverConfig(r.scratch.Cfg, r.scratch.Logger))})
	if err := m.Start(ctx); err != nil {
		db.Close(ctx)
		return nil, nil, nil, fmt.Errorf("measure: %w", err)
	}
	return m, &deploy.Others{Receiver: r.rcv.pid(), Postmaster: pm, DB: db}, func() { db.Close(ctx) }, nil
}
