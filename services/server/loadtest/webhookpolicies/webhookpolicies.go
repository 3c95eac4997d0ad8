// Package webhookpolicies is the load test of the webhook delivery
// policies: it measures how many events per second an unordered
// subscription delivers to a receiver that answers in --latency, and checks
// that an ordered subscription fed the same events in the same run
// receives them strictly in seq order. The command perf/webhook_policies
// only calls Run; the code lives here because Go lets only packages under
// services/server import the server's internal packages.
//
//	go run ./perf/webhook_policies [--rate 250/s] [--duration 30s] [--latency 200ms]
//	    [--max-in-flight 50] [--goal 200] [--batch 10] [--short] [--config FILE] [--keep]
//
// It creates a scratch database on the local server (or the one
// BOTHY_DATABASE_URL names), migrates it, starts a local receiver on
// 127.0.0.1 that holds every request for --latency and verifies every
// signature with the Standard Webhooks library, creates one unordered
// subscription (--max-in-flight) and one ordered one on the same space,
// runs the worker role in this process (app.Server with the webhooks
// module, what "bothy server --role=worker" runs), appends events at the
// fixed rate through the producer API for --duration (in transactions of
// --batch events, so the shared log's commits keep up with the rate), lets
// the unordered subscription drain, and drops the database.
//
// It fails (ErrFailed) when a signature did not verify, the unordered
// subscription lost an event or received one twice, the ordered one received
// one out of order or twice, or the unordered one delivered below --goal.
package webhookpolicies

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/delivery"
	shared "github.com/bothy/bothy/services/server/loadtest/harness"
)

var (
	// ErrFailed is returned when a correctness check failed: a bad
	// signature, a lost, repeated or out-of-order delivery.
	ErrFailed = errors.New("webhook policies load test failed")
	// ErrBelowGoal is returned (wrapping ErrFailed) when the checks held
	// but the unordered subscription delivered fewer events per second
	// than --goal.
	ErrBelowGoal = fmt.Errorf("%w: below the throughput goal", ErrFailed)
)

type options struct {
	rate        float64
	duration    time.Duration
	latency     time.Duration
	maxInFlight int
	goal        float64
	producers   int
	batch       int
	drain       time.Duration
	config      string
	short       bool
	keep        bool
	profile     string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("webhook_policies", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	rate := fs.String("rate", "250/s", "events appended per second (open loop)")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "how long events are appended")
	fs.DurationVar(&o.latency, "latency", 200*time.Millisecond, "how long the receiver takes to answer each request")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 50, "the unordered subscription's max_in_flight")
	fs.Float64Var(&o.goal, "goal", 200, "events per second the unordered subscription must deliver (0: no goal)")
	fs.IntVar(&o.producers, "producers", 8, "concurrent producer goroutines")
	fs.IntVar(&o.batch, "batch", 10, "events per append (one transaction); the rate is kept as batches of this size")
	fs.DurationVar(&o.drain, "drain", 2*time.Minute, "how long the unordered subscription may take to deliver the rest after the load")
	fs.StringVar(&o.config, "config", "", "bothy configuration file (river.*, database.*, webhooks.*)")
	fs.BoolVar(&o.short, "short", false, "a few seconds, for go test: --duration 3s --rate 100/s --goal 0 unless given")
	fs.BoolVar(&o.keep, "keep", false, "keep the scratch database for inspection")
	fs.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the load and the drain to this file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.short {
		if !set["duration"] {
			o.duration = 3 * time.Second
		}
		if !set["rate"] {
			*rate = "100/s"
		}
		if !set["goal"] {
			o.goal = 0
		}
	}
	r, err := strconv.ParseFloat(strings.TrimSuffix(*rate, "/s"), 64)
	if err != nil || r <= 0 || r > 20000 {
		return nil, fmt.Errorf("--rate %q: want events per second such as 250/s", *rate)
	}
	o.rate = r
	if o.duration <= 0 || o.latency < 0 || o.producers < 1 || o.drain <= 0 || o.batch < 1 {
		return nil, errors.New("--duration, --producers, --batch and --drain must be positive, --latency not negative")
	}
	if o.maxInFlight < 1 || o.maxInFlight > webhooks.MaxMaxInFlight {
		return nil, fmt.Errorf("--max-in-flight %d: want 1..%d", o.maxInFlight, webhooks.MaxMaxInFlight)
	}
	return o, nil
}

// space is where the events go; both subscriptions take every event of it.
const space = "perf-webhooks"

// harness is one run's state.
type harness struct {
	opts   *options
	logger *slog.Logger
	pool   *pgxpool.Pool
	log    *postgres.EventLog
	rcv    *receiver

	mu      gosync.Mutex
	commits map[int64]time.Time // seq -> committed_at
}

// Run runs the load test with command-line args, writing the summary to
// stdout. It returns an error wrapping ErrFailed when a check failed, and
// other errors when the run could not be done; the scratch database is
// dropped in every case unless --keep.
func Run(ctx context.Context, args []string, stdout io.Writer, environ []string) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	scratch, err := shared.OpenScratch(ctx, &shared.ScratchParams{
		Tool: "webhook_policies", ConfigFile: o.config, Environ: environ, MaxConns: o.producers + 4, Keep: o.keep,
		Stdout: stdout,
	})
	if err != nil {
		return err
	}
	defer scratch.Close(ctx)
	cfg, logger := scratch.Cfg, scratch.Logger
	h := &harness{opts: o, logger: logger, pool: scratch.Pool, commits: map[int64]time.Time{}}
	h.log = postgres.NewEventLog(h.pool, nil)
	defer h.log.Close()
	h.rcv = newReceiver(o.latency)
	defer h.rcv.close()
	if err := h.seed(ctx, cfg); err != nil {
		return fmt.Errorf("seed: %w", err)
	}

	w, err := shared.StartWorker(ctx, &shared.WorkerParams{Cfg: cfg, Logger: logger, Modules: []module.Factory{delivery.NewModule(app.WebhooksConfig(cfg))}})
	if err != nil {
		return err
	}
	defer w.Stop()
	if o.profile != "" {
		f, err := os.Create(o.profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	load0 := shared.LoadAvg()
	start := time.Now()
	seqs, err := h.load(ctx)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	loadEnd := time.Now()
	drained := h.rcv.awaitAll(ctx, unordered, seqs, o.drain, w.Done)
	res := h.result(seqs, start, loadEnd, drained)
	res.loadBefore, res.loadAfter = load0, shared.LoadAvg()
	fmt.Fprint(stdout, res.summary(o))
	return res.verdict(o)
}

// seed creates the owner with read on the space and the two
// subscriptions.
func (h *harness) seed(ctx context.Context, cfg *config.Config) error {
	const owner = "perf-owner"
	if err := authz.CreatePrincipal(ctx, h.pool, owner, authz.KindUser); err != nil {
		return err
	}
	if err := authz.Grant(ctx, h.pool, &authz.GrantParams{Space: space, Principal: owner, Right: authz.RightRead}); err != nil {
		return err
	}
	for _, t := range []struct {
		name string
		p    *webhooks.PolicyParams
	}{
		{unordered, &webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(h.opts.maxInFlight)}},
		{ordered, &webhooks.PolicyParams{Name: new(webhooks.PolicyOrdered)}},
	} {
		_, secret, err := webhooks.Create(ctx, h.pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: owner, Space: space,
			URL: h.rcv.url(t.name), AllowPrivateTargets: true, Policy: t.p, Limits: new(app.WebhookLimits(cfg))})
		if err != nil {
			return err
		}
		if err := h.rcv.add(t.name, secret); err != nil {
			return err
		}
	}
	return nil
}

// load appends events at the rate for the duration, open loop, in batches
// of --batch: batch i is due at start + i*batch/rate whatever happened to
// the ones before. It returns the seqs written, ascending.
func (h *harness) load(ctx context.Context) ([]int64, error) {
	o := h.opts
	batches, err := shared.OpenLoop(ctx, &shared.LoadParams{Rate: o.rate / float64(o.batch), Duration: o.duration, Producers: o.producers}, h.write)
	seqs := slices.Concat(batches...)
	slices.Sort(seqs)
	return seqs, err
}

// write commits batch i through the producer API and records the commit
// time of its events (the log's committed_at, on this machine's clock).
func (h *harness) write(ctx context.Context, i int) ([]int64, error) {
	evs, err := h.log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
		out := make([]sync.NewEvent, h.opts.batch)
		for j := range out {
			out[j] = sync.NewEvent{Space: space, Type: "item.updated", Actor: "perf-writer", Data: fmt.Appendf(nil, `{"batch":%d,"n":%d}`, i, j)}
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	seqs := make([]int64, len(evs))
	h.mu.Lock()
	for j := range evs {
		seqs[j] = evs[j].Seq
		h.commits[evs[j].Seq] = evs[j].CommittedAt
	}
	h.mu.Unlock()
	return seqs, nil
}
