package deploy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/bothy/bothy/services/server/internal/testsweep"
)

// DeploymentParams says how to run bothy for a load test.
type DeploymentParams struct {
	// Bin is the binary to run; "" builds it from this checkout
	// (BuildOrUse).
	Bin string
	// Keys are every process's configuration (ServerParams.Keys);
	// database.url is required.
	Keys map[string]string
	// ConfigFile, if set, is every process's --config.
	ConfigFile string
	// Workers is how many worker processes StartWorkers starts. Default 1.
	Workers int
	// AdminURL connects to the maintenance database of the server the
	// processes use, whose backends are sampled (Backends). Required.
	AdminURL string
	// Stdout gets the description (Describe) and what goes wrong in the
	// background. Required.
	Stdout io.Writer
}

// Deployment is the bothy processes of a load test, one api and the
// workers, each started from one binary with one configuration, and a
// sampler of the CPU time of the PostgreSQL backends serving them.
type Deployment struct {
	Bin *Binary
	// LogDir holds the processes' logs (and a built binary).
	LogDir   string
	API      *Server
	Workers  []*Server
	Backends *Backends

	p DeploymentParams
	// stopSampling ends the backends' sampler and waits for it.
	stopSampling func()
}

// NewDeployment finds or builds the binary and starts sampling the
// server's backends every 200 ms; no bothy process runs yet. Close undoes
// it, also when NewDeployment fails.
func NewDeployment(ctx context.Context, p *DeploymentParams) (*Deployment, error) {
	if p.Keys["database.url"] == "" || p.AdminURL == "" || p.Stdout == nil {
		return nil, errors.New("deploy: want database.url, AdminURL and Stdout")
	}
	// Owned (testsweep): it holds the built binary the processes run, which
	// a later run stops, with the directory, if this one is killed.
	dir, err := testsweep.MkdirTemp("bothy-perf-deploy-")
	if err != nil {
		return nil, err
	}
	d := &Deployment{LogDir: dir, p: *p}
	d.p.Workers = cmp.Or(p.Workers, 1)
	if d.Bin, err = BuildOrUse(ctx, p.Bin, dir); err != nil {
		d.Close(ctx, false)
		return nil, err
	}
	if err := d.startSampling(ctx); err != nil {
		d.Close(ctx, false)
		return nil, err
	}
	return d, nil
}

// startSampling samples the backends' CPU time by role every 200 ms
// until Stop.
func (d *Deployment) startSampling(ctx context.Context) error {
	var err error
	if d.Backends, err = OpenBackends(ctx, d.p.AdminURL); err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Backends.Run(sctx, 200*time.Millisecond) }()
	d.stopSampling = func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(d.p.Stdout, "sampling PostgreSQL backends: %v\n", err)
		}
	}
	return nil
}

// StartAPI starts the api process and waits until it is ready.
func (d *Deployment) StartAPI(ctx context.Context) error {
	var err error
	d.API, err = d.start(ctx, "api", "")
	return err
}

// StartWorkers starts the worker processes and waits until they are
// ready.
func (d *Deployment) StartWorkers(ctx context.Context) error {
	for i := range d.p.Workers {
		w, err := d.start(ctx, "worker", fmt.Sprint(i+1))
		if err != nil {
			return err
		}
		d.Workers = append(d.Workers, w)
	}
	return nil
}

// start starts one process of role and waits, at most a minute, until it
// is ready.
func (d *Deployment) start(ctx context.Context, role, name string) (*Server, error) {
	s, err := StartServer(ctx, &ServerParams{Bin: d.Bin.Path, Role: role, Name: name, Keys: d.p.Keys,
		ConfigFile: d.p.ConfigFile, LogDir: d.LogDir})
	if err != nil {
		return nil, err
	}
	if err := s.Ready(ctx, time.Minute); err != nil {
		s.Stop(5 * time.Second)
		return nil, err
	}
	return s, nil
}

// APIURL is the api's base URL, such as http://127.0.0.1:8080.
func (d *Deployment) APIURL() string { return "http://" + d.API.Addr }

// Describe says what runs, so a reader of the output sees it is the
// deployment: separate processes of the built binary, and producers
// posting over HTTP with p's requests.
func (d *Deployment) Describe(p *ProducerParams) {
	w := d.p.Stdout
	fmt.Fprintf(w, "deployment: %s (%s)\n", d.Bin.Path, d.Bin.Version)
	fmt.Fprintf(w, "  bothy server --role=api pid %d on %s; %d x bothy server --role=worker, pids %s\n",
		d.API.PID(), d.API.Addr, len(d.Workers), pids(d.Workers))
	fmt.Fprintf(w, "  producers: a separate process POSTing to %s/v1/spaces/{space}/events with a bearer token, "+
		"%d event(s) per request, %d connections; logs in %s\n", d.APIURL(), p.EventsPerRequest, p.Connections, d.LogDir)
}

func pids(servers []*Server) string {
	var out []string
	for _, s := range servers {
		out = append(out, fmt.Sprint(s.PID()))
	}
	return strings.Join(out, ", ")
}

// Watch receives an error once any of the processes started so far ends.
func (d *Deployment) Watch() <-chan error {
	if d.API == nil {
		return Watch(d.Workers...)
	}
	return Watch(append([]*Server{d.API}, d.Workers...)...)
}

// Stop stops the processes (the workers first, so that nothing they send
// is cut off by the api's end) and the sampler. It may be called more
// than once.
func (d *Deployment) Stop() {
	for _, w := range d.Workers {
		w.Stop(30 * time.Second)
	}
	if d.API != nil {
		d.API.Stop(30 * time.Second)
	}
	if d.stopSampling != nil {
		d.stopSampling()
		d.stopSampling = nil
	}
}

// Close stops everything and removes the log directory (with a built
// binary) unless keep: a caller keeps it when the run failed, since the
// logs say why.
func (d *Deployment) Close(ctx context.Context, keep bool) {
	d.Stop()
	if d.Backends != nil {
		d.Backends.Close(ctx)
	}
	if keep {
		_ = testsweep.Disown(d.LogDir)
	} else {
		_ = os.RemoveAll(d.LogDir)
	}
}

// Record starts perf record on the api and on the workers into dir
// (api.perf.data, worker.perf.data) and returns what stops it; with dir
// "" it records nothing.
func (d *Deployment) Record(ctx context.Context, dir string) (stop func(), err error) {
	if dir == "" {
		return func() {}, nil
	}
	api, err := Record(ctx, dir, "api", d.API.PID())
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, w := range d.Workers {
		pids = append(pids, w.PID())
	}
	worker, err := Record(ctx, dir, "worker", pids...)
	if err != nil {
		api.Stop()
		return nil, err
	}
	return func() {
		api.Stop()
		worker.Stop()
		fmt.Fprintf(d.p.Stdout, "perf: %s, %s (perf report -i FILE --no-children)\n", api.File, worker.File)
	}, nil
}
