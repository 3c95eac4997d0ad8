package webhookhandoff

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dburl"
	"github.com/bothy/bothy/services/server/loadtest/cost"
	"github.com/bothy/bothy/services/server/loadtest/deploy"
)

// deployment is the bothy processes of a deployment-mode run and what
// they are measured with.
type deployment struct {
	bin      *deploy.Binary
	logDir   string
	token    string
	api      *deploy.Server
	workers  []*deploy.Server
	backends *deploy.Backends
	// stopSampling ends the backends' sampler and waits for it.
	stopSampling func()
}

// writer is the principal the HTTP producers append as.
const writer = "perf-writer"

// prepareDeployment finds or builds the binary and mints the producers'
// token: write on every space, scope events:write.
func (h *handoff) prepareDeployment(ctx context.Context) (*deployment, error) {
	dir, err := os.MkdirTemp("", "bothy-perf-deploy-")
	if err != nil {
		return nil, err
	}
	d := &deployment{logDir: dir}
	if d.bin, err = deploy.BuildOrUse(ctx, h.opts.bin, dir); err != nil {
		return nil, err
	}
	pool := h.scratch.Pool
	for i := range h.opts.spaces {
		g := &authz.GrantParams{Space: fmt.Sprintf("space-%03d", i), Principal: writer, Right: authz.RightWrite}
		if err := authz.Grant(ctx, pool, g); err != nil {
			return nil, err
		}
	}
	_, d.token, err = authz.CreateToken(ctx, pool, &authz.CreateTokenParams{Principal: writer, Name: "perf producers",
		Scopes: []string{authz.ScopeEventsWrite}})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// serverKeys are the configuration of every bothy process of the run: the
// scratch database and receivers on loopback; the rest is the defaults
// (logs at info, an access log line per request, into the log files) or
// --config's.
func (h *handoff) serverKeys() map[string]string {
	return map[string]string{"database.url": h.scratch.URL,
		"webhooks.allow_private_targets": "true", "push.allow_private_targets": "true"}
}

// startServer starts one bothy process of role and waits until it is ready.
func (h *handoff) startServer(ctx context.Context, d *deployment, role, name string) (*deploy.Server, error) {
	s, err := deploy.StartServer(ctx, &deploy.ServerParams{Bin: d.bin.Path, Role: role, Name: name, Keys: h.serverKeys(),
		ConfigFile: h.opts.Config, LogDir: d.logDir})
	if err != nil {
		return nil, err
	}
	if err := s.Ready(ctx, time.Minute); err != nil {
		s.Stop(5 * time.Second)
		return nil, err
	}
	return s, nil
}

// stop stops the processes (workers first, so that nothing they send is
// cut off by the api's end) and the sampler.
func (d *deployment) stop() {
	for _, w := range d.workers {
		w.Stop(30 * time.Second)
	}
	if d.api != nil {
		d.api.Stop(30 * time.Second)
	}
	if d.stopSampling != nil {
		d.stopSampling()
		d.stopSampling = nil
	}
}

// close removes the logs unless --keep or the run failed (then they say
// why).
func (d *deployment) close(ctx context.Context, keep bool) {
	d.stop()
	if d.backends != nil {
		d.backends.Close(ctx)
	}
	if !keep {
		_ = os.RemoveAll(d.logDir)
	}
}

// startSampling samples the PostgreSQL backends' CPU time by role every
// 200 ms until stop.
func (h *handoff) startSampling(ctx context.Context, d *deployment) error {
	admin, err := dburl.WithDatabase(h.scratch.URL, "postgres")
	if err != nil {
		return err
	}
	if d.backends, err = deploy.OpenBackends(ctx, admin); err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.backends.Run(sctx, 200*time.Millisecond) }()
	d.stopSampling = func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(h.stdout, "sampling PostgreSQL backends: %v\n", err)
		}
	}
	return nil
}

// describe says what runs, so a reader of the output sees it is the
// deployment: separate processes of the built binary, producers over HTTP.
func (h *handoff) describe(d *deployment) {
	o := h.opts
	fmt.Fprintf(h.stdout, "deployment: %s (%s)\n", d.bin.Path, d.bin.Version)
	fmt.Fprintf(h.stdout, "  bothy server --role=api pid %d on %s; %d x bothy server --role=worker, pids %s\n",
		d.api.PID(), d.api.Addr, len(d.workers), pids(d.workers))
	fmt.Fprintf(h.stdout, "  producers: a separate process POSTing to http://%s/v1/spaces/{space}/events with a bearer token, "+
		"%d event(s) per request, %d connections; logs in %s\n", d.api.Addr, o.eventsPerRequest, o.connections, d.logDir)
}

// watch receives an error once any of the processes ends.
func (d *deployment) watch() <-chan error {
	return deploy.Watch(append([]*deploy.Server{d.api}, d.workers...)...)
}

func pids(servers []*deploy.Server) string {
	var out []string
	for _, s := range servers {
		out = append(out, fmt.Sprint(s.PID()))
	}
	return strings.Join(out, ", ")
}

// cpuSample is what the deployment's processes and the server have used
// at one moment.
type cpuSample struct {
	at       time.Time
	api      time.Duration
	workers  time.Duration
	postgres time.Duration
	receiver time.Duration
	wal      int64
}

// sampleCPU reads the CPU time of the api, the workers, the receiver and
// the whole PostgreSQL server, and the WAL position.
func (h *handoff) sampleCPU(ctx context.Context, d *deployment, c *costs) (cpuSample, error) {
	s := cpuSample{at: time.Now()}
	var err error
	if s.api, err = d.api.CPU(); err != nil {
		return s, fmt.Errorf("api CPU: %w", err)
	}
	for _, w := range d.workers {
		t, err := w.CPU()
		if err != nil {
			return s, fmt.Errorf("worker CPU: %w", err)
		}
		s.workers += t
	}
	if s.receiver, err = cost.ProcessCPU(h.rcv.pid()); err != nil {
		return s, err
	}
	pm, err := h.private.PID()
	if err != nil {
		return s, err
	}
	if s.postgres, err = cost.TreeCPU(pm); err != nil {
		return s, err
	}
	s.wal, err = c.db.WALPosition(ctx)
	return s, err
}

// phaseCost is what the measured phase cost, from the producers' start to
// the last delivery's arrival.
type phaseCost struct {
	seconds                          float64
	api, workers, postgres, receiver time.Duration
	postgresBy                       map[string]time.Duration
	wal                              int64
}

func between(a, b cpuSample, by map[string]time.Duration) phaseCost {
	return phaseCost{seconds: b.at.Sub(a.at).Seconds(), api: b.api - a.api, workers: b.workers - a.workers,
		postgres: b.postgres - a.postgres, receiver: b.receiver - a.receiver, postgresBy: by, wal: b.wal - a.wal}
}
