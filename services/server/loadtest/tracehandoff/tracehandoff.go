// Package tracehandoff measures what tracing costs the hand-off: the time
// from a producer's commit to the webhook request at its receiver and to the
// decrypted push message at its device, with tracing off and on, in slices
// that alternate the two so machine noise hits both alike. The command
// perf/trace_handoff only calls Run.
//
//	go run ./perf/trace_handoff [--rate 200/s] [--slice 10s] [--slices 6] [--spaces 10] [--producers 16]
//
// It creates a scratch database on the local server (or the one
// BOTHY_DATABASE_URL names), migrates it, starts a webhook receiver that
// answers 204 at once, a local push service that checks VAPID and decrypts
// every message, and a local OTLP/HTTP receiver that accepts every export
// and discards it. Each space has one webhook subscription and one device;
// each event goes to both. Per slice it runs the worker role in this
// process (app.Server with the webhooks and push modules) and appends
// events at the rate through the producer (postgres.EventLog.Write), open
// loop. With tracing on, the producer and the worker trace with the SDK as
// "bothy server" configures it for an OTLP endpoint (batch span processor,
// OTLP/HTTP, parent-based always-on sampling): every write, round, job run
// and webhook attempt is a span, and the trace context rides in the events
// and jobs. It drops the database at the end.
package tracehandoff

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/delivery"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	shared "github.com/bothy/bothy/services/server/loadtest/harness"
)

type options struct {
	rate      float64
	slice     time.Duration
	slices    int
	spaces    int
	producers int
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("trace_handoff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	rate := fs.String("rate", "200/s", "events appended per second")
	fs.DurationVar(&o.slice, "slice", 10*time.Second, "measured load time of one slice")
	fs.IntVar(&o.slices, "slices", 6, "slices, alternating off and on (an even number gives both as many)")
	fs.IntVar(&o.spaces, "spaces", 10, "spaces, each with one webhook subscription and one device")
	fs.IntVar(&o.producers, "producers", 16, "concurrent producer goroutines")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	r, err := strconv.ParseFloat(strings.TrimSuffix(*rate, "/s"), 64)
	if err != nil || r <= 0 || r > 5000 {
		return nil, fmt.Errorf("--rate %q: want events per second such as 200/s", *rate)
	}
	o.rate = r
	if o.slice <= 0 || o.slices < 2 || o.spaces < 1 || o.producers < 1 {
		return nil, errors.New("--slice, --spaces and --producers must be positive, --slices at least 2")
	}
	return o, nil
}

// harness is one run's shared state.
type harness struct {
	opts    *options
	logger  *slog.Logger
	scratch *shared.Scratch
	pool    *pgxpool.Pool
	vapid   push.VAPIDKeys
	push    *pushtest.Receiver
	hooks   *webhookstest.Server
	otlp    *httptest.Server
	spaces  []string

	otlpBytes atomic.Int64

	mu       gosync.Mutex
	commits  map[uuid.UUID]time.Time
	webhook  map[uuid.UUID]time.Time
	messages map[uuid.UUID]time.Time
}

// variant is tracing off or on.
type variant struct {
	name   string
	traced bool
}

// result collects a variant's latencies.
type result struct {
	variant
	events           int
	webhook, message []time.Duration
	lostWebhook      int
	lostMessage      int
	// cpu is this process's CPU time (user and system) over the measured
	// loads and their waits: producers, worker, receivers and the OTLP
	// sink, the same parts in both variants.
	cpu time.Duration
}

// Run runs the measurement with command-line args and writes the summary
// to stdout.
func Run(ctx context.Context, args []string, stdout io.Writer, environ []string) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	h := &harness{opts: o, logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		commits: map[uuid.UUID]time.Time{}, webhook: map[uuid.UUID]time.Time{}, messages: map[uuid.UUID]time.Time{}}
	if h.vapid, err = push.GenerateVAPIDKeys(); err != nil {
		return err
	}
	if h.scratch, err = shared.OpenScratch(ctx, &shared.ScratchParams{
		Tool: "trace_handoff", Environ: environ, MaxConns: o.producers + 4, Logger: h.logger, Stdout: io.Discard,
		Keys: map[string]string{"push.vapid_public_key": h.vapid.Public, "push.vapid_private_key": h.vapid.Private},
	}); err != nil {
		return err
	}
	defer h.scratch.Close(ctx)
	h.pool = h.scratch.Pool
	h.startReceivers()
	defer h.push.Close()
	defer h.hooks.Close()
	defer h.otlp.Close()
	if err := h.seed(ctx); err != nil {
		return fmt.Errorf("seed: %w", err)
	}

	results := []*result{{variant: variant{name: "off"}}, {variant: variant{name: "on", traced: true}}}
	fmt.Fprintf(stdout, "trace_handoff: %d slices of %s at %.0f events/s, %d spaces, %d producers; load before: %s\n",
		o.slices, o.slice, o.rate, o.spaces, o.producers, uptime())
	for s := range o.slices {
		r := results[s%2]
		ids, cpu, err := h.slice(ctx, r.traced)
		if err != nil {
			return fmt.Errorf("slice %d (%s): %w", s+1, r.name, err)
		}
		h.add(r, ids)
		r.cpu += cpu
		fmt.Fprintf(stdout, "  slice %d %-3s %5d events  webhook p95 %-8s push p95 %-8s CPU %.0fµs/event\n", s+1, r.name, len(ids),
			pct(lastN(r.webhook, len(ids)), 95), pct(lastN(r.message, len(ids)), 95), float64(cpu.Microseconds())/float64(max(1, len(ids))))
	}
	fmt.Fprintf(stdout, "load after: %s; OTLP bytes received (on): %d\n", uptime(), h.otlpBytes.Load())
	fmt.Fprintf(stdout, "%-8s %7s  %-32s  %-32s  %-14s %s\n", "tracing", "events", "webhook p50 / p95 / p99", "push p50 / p95 / p99", "CPU/event", "lost (webhook, push)")
	for _, r := range results {
		fmt.Fprintf(stdout, "%-8s %7d  %-32s  %-32s  %-14s %d, %d\n", r.name, r.events,
			pct(r.webhook, 50)+" / "+pct(r.webhook, 95)+" / "+pct(r.webhook, 99),
			pct(r.message, 50)+" / "+pct(r.message, 95)+" / "+pct(r.message, 99),
			fmt.Sprintf("%.0fµs", float64(r.cpu.Microseconds())/float64(max(1, r.events))), r.lostWebhook, r.lostMessage)
	}
	return nil
}

// startReceivers starts the webhook receiver, the push service and the
// OTLP sink.
func (h *harness) startReceivers() {
	h.hooks = webhookstest.NewServer(&webhookstest.Options{Lean: true, OnArrival: func(a webhookstest.Arrival) {
		if id, err := uuid.Parse(a.ID); err == nil {
			h.mu.Lock()
			if _, seen := h.webhook[id]; !seen {
				h.webhook[id] = a.At
			}
			h.mu.Unlock()
		}
	}})
	h.hooks.SetDefaultRule(webhookstest.Status(http.StatusNoContent))
	h.push = pushtest.NewReceiver(&pushtest.ReceiverConfig{VAPIDPublicKey: h.vapid.Public, OnMessage: func(m pushtest.Message) {
		var p push.Payload
		if json.Unmarshal(m.Payload, &p) != nil {
			return
		}
		h.mu.Lock()
		if _, seen := h.messages[p.EventID]; !seen {
			h.messages[p.EventID] = m.At
		}
		h.mu.Unlock()
	}})
	h.otlp = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		h.otlpBytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
}

// seed creates per space a webhook subscription of an owner with read on
// it and a device of another member, and the writer.
func (h *harness) seed(ctx context.Context) error {
	if err := authz.CreatePrincipal(ctx, h.pool, "perf-writer", authz.KindApp); err != nil {
		return err
	}
	reg := push.NewRegistry(&push.RegistryConfig{AllowPrivateTargets: true})
	for i := range h.opts.spaces {
		space := fmt.Sprintf("space-%03d", i)
		h.spaces = append(h.spaces, space)
		owner, member := fmt.Sprintf("owner-%03d", i), fmt.Sprintf("member-%03d", i)
		for _, p := range []string{owner, member} {
			if err := authz.CreatePrincipal(ctx, h.pool, p, authz.KindUser); err != nil {
				return err
			}
			if err := authz.Grant(ctx, h.pool, &authz.GrantParams{Space: space, Principal: p, Right: authz.RightRead}); err != nil {
				return err
			}
		}
		if _, _, err := webhooks.Create(ctx, h.pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: owner, Space: space,
			URL: h.hooks.URL(space), AllowPrivateTargets: true}); err != nil {
			return fmt.Errorf("webhook subscription: %w", err)
		}
		d, endpoint, err := h.push.AddDevice(member)
		if err != nil {
			return err
		}
		var s push.Subscription
		s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, d.P256dh(), d.Auth()
		if _, err := reg.Register(ctx, h.pool, &push.RegisterParams{Principal: member, Subscription: s, UserAgent: "trace_handoff"}); err != nil {
			return err
		}
	}
	return nil
}

// tracer returns the tracer provider of a slice and how to stop it.
func (h *harness) tracer(traced bool) (trace.TracerProvider, func(), error) {
	if !traced {
		return noop.NewTracerProvider(), func() {}, nil
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(h.otlp.URL+"/v1/traces"))
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	return tp, func() { _ = tp.Shutdown(context.Background()) }, nil
}

// slice starts a worker, warms it up, appends events at the rate for one
// slice, waits for their webhooks and messages and stops the worker. It
// returns the ids of the measured events and the process's CPU time from
// the start of their load to the end of the wait.
func (h *harness) slice(ctx context.Context, traced bool) (ids []uuid.UUID, cpu time.Duration, err error) {
	tp, stopTracing, err := h.tracer(traced)
	if err != nil {
		return nil, 0, err
	}
	defer stopTracing()
	cfg, err := h.scratch.Config(nil)
	if err != nil {
		return nil, 0, err
	}
	sctx, cancel := context.WithCancel(ctx)
	srv := app.NewServer(cfg, h.logger, []module.Factory{delivery.NewModule(app.WebhooksConfig(cfg)), push.NewModule(app.PushConfig(cfg))})
	srv.TraceWith(tp)
	done := make(chan error, 1)
	go func() { done <- srv.Run(sctx) }()
	defer func() {
		cancel()
		<-done
	}()
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = srv.Addr(actx)
	acancel()
	if err != nil {
		return nil, 0, fmt.Errorf("worker did not start: %w", err)
	}
	log := postgres.NewEventLog(h.pool, &postgres.EventLogConfig{Tracer: tp})
	defer log.Close()

	warm, err := h.load(ctx, log, time.Second, min(h.opts.rate, 100))
	if err != nil {
		return nil, 0, err
	}
	h.await(ctx, warm, 20*time.Second)
	cpu0 := processCPU()
	if ids, err = h.load(ctx, log, h.opts.slice, h.opts.rate); err != nil {
		return nil, 0, err
	}
	h.await(ctx, ids, 30*time.Second)
	return ids, processCPU() - cpu0, nil
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// load appends events at rate for d, open loop (shared.OpenLoop), and
// returns their ids.
func (h *harness) load(ctx context.Context, log *postgres.EventLog, d time.Duration, rate float64) ([]uuid.UUID, error) {
	return shared.OpenLoop(ctx, &shared.LoadParams{Rate: rate, Duration: d, Producers: h.opts.producers},
		func(ctx context.Context, i int) (uuid.UUID, error) { return h.write(ctx, log, i) })
}

// write commits one event and records its committed_at: taken by the
// server under the counter lock right before COMMIT, on this machine's
// clock, so it does not depend on when this goroutine runs again.
func (h *harness) write(ctx context.Context, log *postgres.EventLog, i int) (uuid.UUID, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return id, err
	}
	space := h.spaces[i%len(h.spaces)]
	evs, err := log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{{ID: id, Space: space, Type: "item.updated", Actor: "perf-writer", Data: []byte(`{"n":1}`)}}, nil
	})
	if err != nil {
		return id, err
	}
	h.mu.Lock()
	h.commits[id] = evs[0].CommittedAt
	h.mu.Unlock()
	return id, nil
}

// await waits until every event of ids has its webhook and its message, at
// most max.
func (h *harness) await(ctx context.Context, ids []uuid.UUID, max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		h.mu.Lock()
		missing := 0
		for _, id := range ids {
			if _, ok := h.webhook[id]; !ok {
				missing++
			} else if _, ok := h.messages[id]; !ok {
				missing++
			}
		}
		h.mu.Unlock()
		if missing == 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// add records the latencies of ids into r.
func (h *harness) add(r *result, ids []uuid.UUID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.events += len(ids)
	for _, id := range ids {
		c := h.commits[id]
		if at, ok := h.webhook[id]; ok {
			r.webhook = append(r.webhook, at.Sub(c))
		} else {
			r.lostWebhook++
		}
		if at, ok := h.messages[id]; ok {
			r.message = append(r.message, at.Sub(c))
		} else {
			r.lostMessage++
		}
	}
}

func lastN(d []time.Duration, n int) []time.Duration { return d[max(0, len(d)-n):] }

// pct is the p-th percentile of d, in milliseconds.
func pct(d []time.Duration, p int) string {
	if len(d) == 0 {
		return "-"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return fmt.Sprintf("%.1fms", float64(s[min(len(s)-1, len(s)*p/100)].Microseconds())/1000)
}

func uptime() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}
