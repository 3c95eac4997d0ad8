// Package pushhandoff is the load test of the push hand-off: it measures
// the time until the decrypted push message arrives at the device, and
// fails when its p95 is above perf.push_handoff_p95. The command
// perf/push_handoff only calls Run; the code lives here because Go lets
// only packages under services/server import the server's internal
// packages.
//
//	go run ./perf/push_handoff [--rate 500/s] [--duration 30s] [--devices N] [--fanout F] [--short] [--json]
//	    [--workers 1] [--connections 64] [--events-per-request 1] [--bin PATH] [--pg-setting k=v] [--out perf/out]
//	go run ./perf/push_handoff --in-process [--rate 500/s] [--duration 30s] [--devices N] [--short]
//	    [--variants 5ms/50ms,1ms/20ms] [--segment 5s] [--cpuprofile FILE] [--out perf/out]
//	go run ./perf/push_handoff --in-process --mode fanout [--devices 10000] [--events 5] [--short]
//
// The deployment mode (the default) runs bothy as users do (package
// deploy): the built binary (or --bin) as a "bothy server --role=api"
// process and --workers "--role=worker" processes, configured with the
// run's VAPID keys and push.allow_private_targets, on a private PostgreSQL
// cluster with PostgreSQL's defaults (and --pg-setting). A receiver
// process serves as the push service: it checks VAPID and decrypts every
// message with its device's private key. The devices, one per principal,
// --fanout principals reading each space, are registered in the database
// directly (push.Registry, what the API's registration runs). Producers
// in a process of their own POST events over HTTP with a bearer token
// holding events:write and write on every space, one space after another.
// After a probe event that times the workers' cold start (their start ->
// its first message) and a second of warm-up, they append at --rate for
// --duration; every message is timed from its request's send and from its
// 201, and the p95 from the 201 is judged. It reports the CPU time per
// event or message of the api, the workers, PostgreSQL (split by the
// application_name of the backends), the receiver and the producers; the
// transactions, statements and River jobs per message; the WAL per event;
// and messages missing, repeated, at a device not of the event's space,
// or failing VAPID or decryption, any of which fails the run. --json ends
// the output with one JSON line of the figures.
//
// The in-process mode (--in-process) creates a scratch database on the
// local server (or the one BOTHY_DATABASE_URL names), starts the local
// push service in this process, registers the devices, runs the worker
// role in this process (app.Server with the push module, what "bothy
// server --role=worker" runs), appends events at the given rate through
// the producer API (postgres.EventLog.Write) and times each message from
// the event's commit, for profiling (--cpuprofile). Two comparisons run
// in this mode only: --variants compares River fetch settings
// (river.fetch_cooldown / river.fetch_poll_interval): the run is cut into
// --segment slices that alternate the variants, restarting the worker
// between slices, so machine noise hits every variant alike, and the
// first variant (by default the configuration's own) is the one judged;
// --mode fanout writes one event at a time to a space whose every member
// has a device, and reports how long the last device waits and messages
// per CPU-second.
//
// Both write push_handoff.txt (the summary) and push_handoff.png (latency
// histograms) into --out, and drop the scratch database (and stop the
// private cluster) at the end unless --keep.
package pushhandoff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	gosync "sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/loadtest/deploy"
	shared "github.com/bothy/bothy/services/server/loadtest/harness"
)

var (
	// ErrOverBudget is returned when the judged variant failed: its p95 is
	// above the budget, or messages were lost or did not decrypt.
	ErrOverBudget = errors.New("push hand-off over budget")
	// ErrP95OverBudget is returned (wrapping ErrOverBudget) when the p95 was
	// the only failure: every message arrived and decrypted.
	ErrP95OverBudget = fmt.Errorf("%w: p95 only", ErrOverBudget)
)

// ChildRoles are the processes the deployment mode starts of its own
// binary besides the receiver: a command runs harness.RunChild(ChildRoles())
// first in main, and a test binary first in TestMain.
func ChildRoles() map[string]shared.ChildFunc {
	return map[string]shared.ChildFunc{deploy.ProducerRole: deploy.RunProducer}
}

// harness is one run's shared state.
type harness struct {
	opts    *options
	logger  *slog.Logger
	scratch *shared.Scratch
	pool    *pgxpool.Pool
	log     *postgres.EventLog
	rcv     *pushtest.Receiver
	vapid   push.VAPIDKeys
	spaces  []string

	mu       gosync.Mutex
	commits  map[uuid.UUID]time.Time
	arrivals map[uuid.UUID][]time.Time
}

// Run runs the load test with command-line args, writing the summary to
// stdout. It returns an error wrapping ErrOverBudget when the judged
// variant misses the budget, and other errors when the run could not be
// done; the scratch database is dropped in every case.
func Run(ctx context.Context, args []string, stdout io.Writer, environ []string) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	cfg, err := config.Load(o.config, environ, nil)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if !o.inProcess {
		return runDeployed(ctx, o, cfg, stdout, environ)
	}
	if len(o.variants) == 0 {
		o.variants = []variant{{Cooldown: cfg.River.FetchCooldown, Poll: cfg.River.FetchPollInterval}}
	}
	budget := cfg.Perf.PushHandoffP95
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	h := &harness{opts: o, logger: logger, commits: map[uuid.UUID]time.Time{}, arrivals: map[uuid.UUID][]time.Time{}}
	if err := h.openScratch(ctx, environ, stdout); err != nil {
		return err
	}
	defer h.scratch.Close(ctx)
	defer h.log.Close()
	if o.mode == "fanout" {
		return h.fanout(ctx, stdout)
	}
	return h.handoff(ctx, stdout, budget)
}

// openScratch makes the VAPID keys, opens the scratch database with them
// in the workers' configuration, and the event log on it.
func (h *harness) openScratch(ctx context.Context, environ []string, stdout io.Writer) error {
	o := h.opts
	var err error
	if h.vapid, err = push.GenerateVAPIDKeys(); err != nil {
		return err
	}
	if h.scratch, err = shared.OpenScratch(ctx, &shared.ScratchParams{
		Tool: "push_handoff", ConfigFile: o.config, Environ: environ, MaxConns: o.producers + 4, Keep: o.keep,
		Logger: h.logger, Stdout: stdout,
		Keys: map[string]string{"push.vapid_public_key": h.vapid.Public, "push.vapid_private_key": h.vapid.Private},
	}); err != nil {
		return err
	}
	h.pool = h.scratch.Pool
	h.log = postgres.NewEventLog(h.pool, nil)
	return nil
}

// handoff runs the hand-off mode: it seeds the devices, measures every
// variant, and writes and judges the summary.
func (h *harness) handoff(ctx context.Context, stdout io.Writer, budget time.Duration) error {
	h.rcv = pushtest.NewReceiver(&pushtest.ReceiverConfig{VAPIDPublicKey: h.vapid.Public, OnMessage: h.arrived})
	defer h.rcv.Close()
	if err := h.seed(ctx); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	stopProfile, err := startProfile(h.opts.profile)
	if err != nil {
		return err
	}
	defer stopProfile()
	start := time.Now()
	results, cpu, err := h.measure(ctx)
	if err != nil {
		return err
	}
	return report(stdout, &summaryParams{opts: h.opts, results: results, budget: budget,
		decryptErrors: h.rcv.Errors(), wall: time.Since(start), cpu: cpu})
}

// startProfile writes a CPU profile to path until stop, when path is not
// "".
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// measure runs the slices, alternating the variants, and reads where each
// variant's time went; it returns the results and the machine's CPU
// summary of the load.
func (h *harness) measure(ctx context.Context) ([]*result, string, error) {
	o := h.opts
	n, slice := sliceCount(o)
	results := make([]*result, len(o.variants))
	for i, v := range o.variants {
		results[i] = &result{Variant: v}
	}
	cpu0 := sampleCPU()
	for s := range n {
		for i, v := range o.variants {
			if err := ctx.Err(); err != nil {
				return nil, "", err
			}
			ids, err := h.segment(ctx, v, slice)
			if err != nil {
				return nil, "", fmt.Errorf("variant %s slice %d: %w", v, s+1, err)
			}
			results[i].add(h, ids, slice)
		}
	}
	cpu := cpuSummary(cpu0, sampleCPU())
	for _, r := range results {
		r.finish()
		if err := r.stages(ctx, h); err != nil {
			return nil, "", fmt.Errorf("read stages: %w", err)
		}
	}
	return results, cpu, nil
}

// sliceCount is how many slices every variant gets and how long one is.
// Slices alternate the variants; each variant gets duration/len(variants).
// A single variant runs as one slice: restarting the worker between
// slices would only add its warm-up (new connections, statement
// preparation) to the measured tail.
func sliceCount(o *options) (int, time.Duration) {
	per := o.duration / time.Duration(len(o.variants))
	n := max(1, int((per+o.segment-1)/o.segment))
	if len(o.variants) == 1 {
		n = 1
	}
	return n, per / time.Duration(n)
}

// report judges the first variant, prints the summary and writes it and
// the histograms into --out. Its error says why the judged variant failed.
func report(stdout io.Writer, p *summaryParams) error {
	out := p.opts.out
	verdict, onlyP95 := judge(p.results[0], p.budget, len(p.decryptErrors))
	p.verdict = verdict
	sum := summary(p)
	fmt.Fprint(stdout, sum)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	txt, png := filepath.Join(out, "push_handoff.txt"), filepath.Join(out, "push_handoff.png")
	if err := os.WriteFile(txt, []byte(sum), 0o644); err != nil {
		return err
	}
	if err := writeHistogram(png, p.results, p.budget); err != nil {
		return fmt.Errorf("histogram: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", txt, png)
	if onlyP95 {
		return fmt.Errorf("%w: %s", ErrP95OverBudget, verdict)
	}
	if verdict != "" {
		return fmt.Errorf("%w: %s", ErrOverBudget, verdict)
	}
	return nil
}

// config builds the worker's configuration for a variant: the caller's
// configuration (file, environment) with the harness's own keys on top.
func (h *harness) config(v variant) (*config.Config, error) {
	return h.scratch.Config(map[string]string{
		"river.fetch_cooldown": v.Cooldown.String(), "river.fetch_poll_interval": v.Poll.String(),
	})
}

// seed creates the writer, one principal per device with read on its
// space, and registers every device with the local push service.
func (h *harness) seed(ctx context.Context) error {
	o := h.opts
	if err := authz.CreatePrincipal(ctx, h.pool, "perf-writer", authz.KindApp); err != nil {
		return err
	}
	reg := push.NewRegistry(&push.RegistryConfig{AllowPrivateTargets: true})
	nspaces := o.devices / o.fanout
	for i := range nspaces {
		h.spaces = append(h.spaces, fmt.Sprintf("space-%04d", i))
	}
	for i := range nspaces * o.fanout {
		principal := fmt.Sprintf("user-%04d", i)
		space := h.spaces[i/o.fanout]
		if err := authz.CreatePrincipal(ctx, h.pool, principal, authz.KindUser); err != nil {
			return err
		}
		if err := authz.Grant(ctx, h.pool, &authz.GrantParams{Space: space, Principal: principal, Right: authz.RightRead}); err != nil {
			return err
		}
		d, endpoint, err := h.rcv.AddDevice(principal)
		if err != nil {
			return err
		}
		var s push.Subscription
		s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, d.P256dh(), d.Auth()
		if _, err := reg.Register(ctx, h.pool, &push.RegisterParams{Principal: principal, Subscription: s, UserAgent: "push_handoff"}); err != nil {
			return err
		}
	}
	return nil
}

// arrived records a decrypted message (called by the receiver).
func (h *harness) arrived(m pushtest.Message) {
	var p push.Payload
	if err := json.Unmarshal(m.Payload, &p); err != nil {
		return // counted as lost
	}
	h.mu.Lock()
	h.arrivals[p.EventID] = append(h.arrivals[p.EventID], m.At)
	h.mu.Unlock()
}

// segment starts a worker with v's River settings, warms it up, appends
// events at the rate for d, waits for their messages and stops the worker.
// It returns the ids of the measured events.
func (h *harness) segment(ctx context.Context, v variant, d time.Duration) ([]uuid.UUID, error) {
	cfg, err := h.config(v)
	if err != nil {
		return nil, err
	}
	done, stop, err := h.startWorker(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer stop()

	// Warm-up: connections, River's producer and the listener settle.
	warm, err := h.load(ctx, 500*time.Millisecond, min(h.opts.rate, 200))
	if err != nil {
		return nil, err
	}
	if err := h.await(ctx, warm, done); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	ids, err := h.load(ctx, d, h.opts.rate)
	if err != nil {
		return nil, err
	}
	_ = h.await(ctx, ids, done) // a miss is reported as lost messages
	return ids, nil
}

// startWorker runs the worker role with cfg and the push module, as "bothy
// server --role=worker" does, until stop is called (once or more); done
// receives what its Run returned.
func (h *harness) startWorker(ctx context.Context, cfg *config.Config) (done <-chan error, stop func(), err error) {
	w, err := shared.StartWorker(ctx, &shared.WorkerParams{Cfg: cfg, Logger: h.logger, Modules: []module.Factory{push.NewModule(app.PushConfig(cfg))}})
	if err != nil {
		return nil, nil, err
	}
	return w.Done, w.Stop, nil
}

// load appends events at rate for d, open loop (shared.OpenLoop), and
// returns their ids.
func (h *harness) load(ctx context.Context, d time.Duration, rate float64) ([]uuid.UUID, error) {
	return shared.OpenLoop(ctx, &shared.LoadParams{Rate: rate, Duration: d, Producers: h.opts.producers}, h.write)
}

// write commits one event through the producer API and records its commit
// time.
func (h *harness) write(ctx context.Context, i int) (uuid.UUID, error) {
	space := h.spaces[i%len(h.spaces)]
	id, err := uuid.NewV7()
	if err != nil {
		return id, err
	}
	evs, err := h.log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{{ID: id, Space: space, Type: "item.updated", Actor: "perf-writer", Data: []byte(`{"n":1}`)}}, nil
	})
	if err != nil {
		return id, err
	}
	h.mu.Lock()
	// The event's committed_at is taken by the server under the counter
	// lock as the last step before COMMIT, on this machine's clock. It is
	// the commit as the log defines it, and it does not depend on when this
	// goroutine is scheduled again after the acknowledgement (which, on a
	// busy machine, came after the message had already arrived).
	h.commits[id] = evs[0].CommittedAt
	h.mu.Unlock()
	return id, nil
}

// await waits until every event has its fanout messages, at most 10s after
// the call; it returns early if the worker stopped.
func (h *harness) await(ctx context.Context, ids []uuid.UUID, done <-chan error) error {
	err := shared.Await(ctx, 10*time.Second, done, func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		missing := 0
		for _, id := range ids {
			if len(h.arrivals[id]) < h.opts.fanout {
				missing++
			}
		}
		return missing
	})
	if err != nil {
		return fmt.Errorf("events of %d without their messages: %w", len(ids), err)
	}
	return nil
}

// result gathers one variant's latencies.
type result struct {
	Variant   variant
	Latencies []time.Duration // commit to decrypted message, one per message
	Events    int
	Lost      int // messages expected but not received
	Measured  time.Duration
	P50, P95  time.Duration
	P99, Max  time.Duration
	// Throughput is decrypted messages per second of measured load.
	Throughput float64
	// Stages splits the latency at the round's transaction start (the
	// job's created_at) and River's fetch (attempted_at).
	Stages []shared.Stage

	ids []uuid.UUID
}

// stagesSQL reads one row per job and event of the events with the ids
// $1: a job's args list its events (a job made before batching is one
// event itself). stagesBySeqSQL reads those of the events with the seqs
// $1.
const (
	stagesSQL = `
SELECT e.committed_at, j.created_at, j.attempted_at
FROM river_job j
CROSS JOIN LATERAL jsonb_array_elements(coalesce(j.args->'events', jsonb_build_array(j.args))) ev
JOIN event_log e ON e.seq = (ev->>'seq')::bigint
WHERE j.kind = 'push.deliver' AND e.id = ANY($1) AND j.attempted_at IS NOT NULL`
	stagesBySeqSQL = `
SELECT e.committed_at, j.created_at, j.attempted_at
FROM river_job j
CROSS JOIN LATERAL jsonb_array_elements(coalesce(j.args->'events', jsonb_build_array(j.args))) ev
JOIN event_log e ON e.seq = (ev->>'seq')::bigint
WHERE j.kind = 'push.deliver' AND e.seq = ANY($1) AND j.attempted_at IS NOT NULL`
)

// stages reads where the time went from the jobs' timestamps.
func (r *result) stages(ctx context.Context, h *harness) error {
	var err error
	r.Stages, err = readStages(ctx, h.pool, stagesSQL, r.ids)
	return err
}

// readStages splits the time from each event's commit at its job's
// creation (the round's transaction start) and River's fetch
// (attempted_at), reading the rows of query (stagesSQL, stagesBySeqSQL)
// for events.
func readStages(ctx context.Context, pool *pgxpool.Pool, query string, events any) ([]shared.Stage, error) {
	qctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rows, err := pool.Query(qctx, query, events)
	if err != nil {
		return nil, err
	}
	var round, pickup []time.Duration
	var committed, created, attempted time.Time
	if _, err := pgx.ForEachRow(rows, []any{&committed, &created, &attempted}, func() error {
		round = append(round, created.Sub(committed))
		pickup = append(pickup, attempted.Sub(created))
		return nil
	}); err != nil {
		return nil, err
	}
	return []shared.Stage{shared.NewStage("commit -> round start", round), shared.NewStage("round start -> River fetch", pickup)}, nil
}

func (r *result) add(h *harness, ids []uuid.UUID, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		c := h.commits[id]
		got := h.arrivals[id]
		r.Lost += max(0, h.opts.fanout-len(got))
		for _, at := range got {
			r.Latencies = append(r.Latencies, at.Sub(c))
		}
	}
	r.Events += len(ids)
	r.ids = append(r.ids, ids...)
	r.Measured += d
}

func (r *result) finish() {
	slices.Sort(r.Latencies)
	r.P50, r.P95, r.P99 = shared.Quantile(r.Latencies, .50), shared.Quantile(r.Latencies, .95), shared.Quantile(r.Latencies, .99)
	if n := len(r.Latencies); n > 0 {
		r.Max = r.Latencies[n-1]
	}
	if r.Measured > 0 {
		r.Throughput = float64(len(r.Latencies)) / r.Measured.Seconds()
	}
}

// judge returns why the judged variant fails, or "", and whether the p95
// was the only reason.
func judge(r *result, budget time.Duration, decryptErrors int) (string, bool) {
	var why []string
	if len(r.Latencies) == 0 {
		why = append(why, "no message arrived")
	}
	slow := r.P95 > budget
	if slow {
		why = append(why, fmt.Sprintf("p95 %s above perf.push_handoff_p95 %s", ms(r.P95), ms(budget)))
	}
	if r.Lost > 0 {
		why = append(why, fmt.Sprintf("%d messages lost", r.Lost))
	}
	if decryptErrors > 0 {
		why = append(why, fmt.Sprintf("%d messages failed VAPID or decryption", decryptErrors))
	}
	return strings.Join(why, "; "), slow && len(why) == 1
}

type summaryParams struct {
	opts          *options
	results       []*result
	budget        time.Duration
	verdict       string
	decryptErrors []error
	wall          time.Duration
	cpu           string
}

func summary(p *summaryParams) string {
	var b strings.Builder
	o := p.opts
	fmt.Fprintf(&b, "push_handoff (M3-24): producer commit -> decrypted push message\n")
	fmt.Fprintf(&b, "date %s, %s, %d CPUs, GOMAXPROCS %d\n", time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(&b, "rate %.0f events/s, %s measured, %d devices, fanout %d, %d producers, %s; wall %s\n",
		o.rate, o.duration, o.devices, o.fanout, o.producers, slicing(o.segment, len(p.results)), p.wall.Round(time.Second))
	b.WriteString(p.cpu)
	fmt.Fprintf(&b, "budget perf.push_handoff_p95 = %s, judged on the first variant\n\n", ms(p.budget))
	fmt.Fprintf(&b, "%-22s %8s %8s %8s %8s %8s %8s %6s %10s\n", "fetch_cooldown/poll", "events", "msgs", "p50", "p95", "p99", "max", "lost", "msgs/s")
	for _, r := range p.results {
		fmt.Fprintf(&b, "%-22s %8d %8d %8s %8s %8s %8s %6d %10.1f\n", r.Variant, r.Events, len(r.Latencies),
			ms(r.P50), ms(r.P95), ms(r.P99), ms(r.Max), r.Lost, r.Throughput)
	}
	fmt.Fprintf(&b, "\nwhere the time went (from River's job timestamps; the rest is fetch -> worker -> push service -> decrypted):\n")
	fmt.Fprintf(&b, "%-22s %-28s %8s %8s %8s\n", "fetch_cooldown/poll", "stage", "p50", "p95", "p99")
	for _, r := range p.results {
		for _, st := range r.Stages {
			fmt.Fprintf(&b, "%-22s %-28s %8s %8s %8s\n", r.Variant, st.Name, ms(st.P50), ms(st.P95), ms(st.P99))
		}
	}
	fmt.Fprintf(&b, "\ndecryption or VAPID failures: %d\n", len(p.decryptErrors))
	for i, err := range p.decryptErrors {
		if i == 5 {
			break
		}
		fmt.Fprintf(&b, "  %v\n", err)
	}
	if p.verdict == "" {
		fmt.Fprintf(&b, "PASS: p95 %s <= %s\n", ms(p.results[0].P95), ms(p.budget))
	} else {
		fmt.Fprintf(&b, "FAIL: %s\n", p.verdict)
	}
	return b.String()
}

func slicing(segment time.Duration, variants int) string {
	if variants == 1 {
		return "one variant, one slice"
	}
	return fmt.Sprintf("slices of %s alternating %d variants", segment, variants)
}

func ms(d time.Duration) string { return shared.MS(d) }
