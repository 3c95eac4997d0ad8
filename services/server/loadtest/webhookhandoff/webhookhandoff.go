// Package webhookhandoff is the webhook hand-off load test: it measures the
// time from a producer's commit to the webhook request arriving at a local
// receiver with its signature verified, and fails when its p95 is above
// perf.webhook_handoff_p95. The command perf/webhook_handoff only calls
// Run; the code lives here because Go lets only packages under
// services/server import the server's internal packages.
//
//	go run ./perf/webhook_handoff [--rate 500/s] [--duration 30s] [--subscriptions 100] [--spaces 10]
//	    [--fanout 1] [--unordered 0] [--producers 16] [--drain 30s] [--short] [--out perf/out] [--config FILE] [--keep]
//
// It creates a scratch database on the local server (or the one
// BOTHY_DATABASE_URL names), migrates it, starts a receiver on 127.0.0.1
// that verifies every signature with the Standard Webhooks library and
// answers 204 at once, and creates --subscriptions subscriptions spread
// over --spaces spaces, each filtering one event type that --fanout
// subscriptions of its space share. The last --unordered of them have the
// unordered policy, the rest the default (ordered). It runs the worker role
// in this process (app.Server with the webhooks module, what "bothy server
// --role=worker" runs), appends events at the rate through the producer
// API (postgres.EventLog.Write), one event per transaction, each to the
// next type in turn, and drops the database at the end.
//
// It writes webhook_handoff.txt (the summary, with where the time went
// from the delivery rows and River's job timestamps) and
// webhook_handoff.png (the latency histogram) into --out.
package webhookhandoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	gosync "sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

var (
	// ErrOverBudget is returned when the run failed its checks: the p95 is
	// above the budget, or deliveries were missing, repeated, out of order
	// on an ordered subscription, or failed their signature.
	ErrOverBudget = errors.New("webhook hand-off over budget")
	// ErrP95OverBudget is returned (wrapping ErrOverBudget) when the p95 was
	// the only failure.
	ErrP95OverBudget = fmt.Errorf("%w: p95 only", ErrOverBudget)
)

type options struct {
	*harness.Flags
	subscriptions int
	spaces        int
	fanout        int
	unordered     int
	drain         time.Duration
	out           string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs, common := harness.NewFlags("webhook_handoff", stderr, &harness.FlagDefaults{
		Rate: "500/s", MaxRate: 20000, Duration: 30 * time.Second, Producers: 16,
		ConfigKeys: "perf.webhook_handoff_p95, river.*, webhooks.*",
		Short:      map[string]string{"duration": "3s", "rate": "100/s", "subscriptions": "8", "spaces": "2", "unordered": "2"},
	})
	o := &options{Flags: common}
	fs.IntVar(&o.subscriptions, "subscriptions", 100, "webhook subscriptions")
	fs.IntVar(&o.spaces, "spaces", 10, "spaces the subscriptions are spread over")
	fs.IntVar(&o.fanout, "fanout", 1, "subscriptions each event goes to (they share its space and type)")
	fs.IntVar(&o.unordered, "unordered", 0, "subscriptions with the unordered policy (the rest are ordered)")
	fs.DurationVar(&o.drain, "drain", 30*time.Second, "how long deliveries may still arrive after the load; later ones count as missing")
	fs.StringVar(&o.out, "out", filepath.Join("perf", "out"), "directory for webhook_handoff.txt and webhook_handoff.png")
	if err := common.Parse(args); err != nil {
		return nil, err
	}
	if o.spaces < 1 || o.fanout < 1 || o.drain <= 0 {
		return nil, errors.New("--spaces, --fanout and --drain must be positive")
	}
	if o.subscriptions < o.spaces*o.fanout || o.subscriptions%(o.spaces*o.fanout) != 0 {
		return nil, fmt.Errorf("--subscriptions %d: want a multiple of --spaces times --fanout (%d)", o.subscriptions, o.spaces*o.fanout)
	}
	if o.unordered < 0 || o.unordered > o.subscriptions {
		return nil, fmt.Errorf("--unordered %d: want 0..%d", o.unordered, o.subscriptions)
	}
	return o, nil
}

// target is a (space, event type) and the subscriptions it goes to.
type target struct {
	space, typ string
	subs       []int
}

// handoff is one run's state.
type handoff struct {
	opts    *options
	scratch *harness.Scratch
	log     *postgres.EventLog
	rcv     *receiver
	targets []target
	subIDs  []uuid.UUID // subscription index -> id

	mu      gosync.Mutex
	commits map[uuid.UUID]time.Time // the event's committed_at
	dest    map[uuid.UUID]*target   // where the event goes
}

// Run runs the load test with command-line args, writing the summary to
// stdout. It returns an error wrapping ErrOverBudget when the run misses
// the budget or a check, and other errors when the run could not be done;
// the scratch database is dropped in every case unless --keep.
func Run(ctx context.Context, args []string, stdout io.Writer, environ []string) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	h, err := start(ctx, o, stdout, environ)
	if err != nil {
		return err
	}
	defer h.close(ctx)
	cfg := h.scratch.Cfg
	w, err := harness.StartWorker(ctx, cfg, h.scratch.Logger, webhooks.NewModule(app.WebhooksConfig(cfg)))
	if err != nil {
		return err
	}
	defer w.Stop()

	// Warm-up: connections, River's producer and the listener settle.
	warm, err := h.load(ctx, time.Second, min(o.Rate, 200))
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if err := h.await(ctx, warm, 30*time.Second, w.Done); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	r := &result{loadBefore: harness.LoadAvg()}
	began := time.Now()
	ids, err := h.load(ctx, o.Duration, o.Rate)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	r.appending = time.Since(began)
	_ = h.await(ctx, ids, o.drain, w.Done) // what did not arrive is reported as missing
	r.wall, r.loadAfter = time.Since(began), harness.LoadAvg()
	w.Stop()
	h.collect(r, ids)
	if err := h.stages(ctx, r, ids); err != nil {
		return fmt.Errorf("read stages: %w", err)
	}
	return h.report(r, cfg.Perf.WebhookHandoffP95, stdout)
}

// start opens the scratch database, starts the receiver and seeds the
// subscriptions; close undoes it.
func start(ctx context.Context, o *options, stdout io.Writer, environ []string) (*handoff, error) {
	h := &handoff{opts: o, commits: map[uuid.UUID]time.Time{}, dest: map[uuid.UUID]*target{}, rcv: newReceiver()}
	var err error
	h.scratch, err = harness.OpenScratch(ctx, &harness.ScratchParams{Tool: "webhook_handoff", ConfigFile: o.Config,
		Environ: environ, MaxConns: o.Producers + 4, Keep: o.Keep, Stdout: stdout})
	if err == nil {
		h.log = postgres.NewEventLog(h.scratch.Pool, nil)
		if err = h.seed(ctx, h.scratch.Cfg); err != nil {
			err = fmt.Errorf("seed: %w", err)
		}
	}
	if err != nil {
		h.close(ctx)
		return nil, err
	}
	return h, nil
}

func (h *handoff) close(ctx context.Context) {
	if h.log != nil {
		h.log.Close()
	}
	if h.scratch != nil {
		h.scratch.Close(ctx)
	}
	h.rcv.close()
}

// seed creates the writer, the owner with read on every space, and the
// subscriptions: subscription k is on space k mod --spaces and filters
// the type its group of --fanout shares.
func (h *handoff) seed(ctx context.Context, cfg *config.Config) error {
	o, pool := h.opts, h.scratch.Pool
	const owner = "perf-owner"
	if err := authz.CreatePrincipal(ctx, pool, "perf-writer", authz.KindApp); err != nil {
		return err
	}
	if err := authz.CreatePrincipal(ctx, pool, owner, authz.KindUser); err != nil {
		return err
	}
	spaces := make([]string, o.spaces)
	for i := range spaces {
		spaces[i] = fmt.Sprintf("space-%03d", i)
		if err := authz.Grant(ctx, pool, &authz.GrantParams{Space: spaces[i], Principal: owner, Right: authz.RightRead}); err != nil {
			return err
		}
	}
	index := map[[2]string]int{} // (space, type) -> targets index
	limits := app.WebhookLimits(cfg)
	for k := range o.subscriptions {
		space, typ := spaces[k%o.spaces], fmt.Sprintf("perf.t%03d", k/o.spaces/o.fanout)
		unordered := k >= o.subscriptions-o.unordered
		var policy *webhooks.PolicyParams
		if unordered {
			policy = &webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(10)}
		}
		secret, err := webhooks.NewSecret()
		if err != nil {
			return err
		}
		url, err := h.rcv.add(secret, !unordered)
		if err != nil {
			return err
		}
		sub, _, err := webhooks.Create(ctx, pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: owner, Space: space,
			URL: url, Secret: secret, EventTypes: []string{typ}, AllowPrivateTargets: true, Policy: policy, Limits: &limits})
		if err != nil {
			return fmt.Errorf("subscription %d: %w", k, err)
		}
		h.subIDs = append(h.subIDs, sub.ID)
		key := [2]string{space, typ}
		t, ok := index[key]
		if !ok {
			t = len(h.targets)
			index[key] = t
			h.targets = append(h.targets, target{space: space, typ: typ})
		}
		h.targets[t].subs = append(h.targets[t].subs, k)
	}
	return nil
}

// load appends events at rate for d, one per transaction, event i to
// target i mod targets. It returns the ids written.
func (h *handoff) load(ctx context.Context, d time.Duration, rate float64) ([]uuid.UUID, error) {
	return harness.OpenLoop(ctx, &harness.LoadParams{Rate: rate, Duration: d, Producers: h.opts.Producers},
		func(ctx context.Context, i int) (uuid.UUID, error) { return h.write(ctx, &h.targets[i%len(h.targets)]) })
}

// write commits one event through the producer API and records its
// committed_at: taken by the server under the counter lock right before
// COMMIT, on this machine's clock, so it does not depend on when this
// goroutine runs again after the acknowledgement.
func (h *handoff) write(ctx context.Context, t *target) (uuid.UUID, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return id, err
	}
	evs, err := h.log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{{ID: id, Space: t.space, Type: t.typ, Actor: "perf-writer", Data: []byte(`{"n":1}`)}}, nil
	})
	if err != nil {
		return id, err
	}
	h.mu.Lock()
	h.commits[id] = evs[0].CommittedAt
	h.dest[id] = t
	h.mu.Unlock()
	return id, nil
}

// await waits until every delivery of ids was received, at most within;
// it returns early if the worker stopped.
func (h *handoff) await(ctx context.Context, ids []uuid.UUID, within time.Duration, done <-chan error) error {
	return harness.Await(ctx, within, done, func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.rcv.missing(ids, func(id uuid.UUID) int { return len(h.dest[id].subs) })
	})
}
