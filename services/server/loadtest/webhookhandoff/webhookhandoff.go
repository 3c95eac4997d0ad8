// Package webhookhandoff is the webhook load test, in two modes. The
// command perf/webhook_handoff only calls Run; the code lives here because
// Go lets only packages under services/server import the server's internal
// packages.
//
//	go run ./perf/webhook_handoff [--rate 500/s] [--duration 30s] [--subscriptions 100] [--spaces 10]
//	    [--fanout 1] [--unordered 0] [--producers 16] [--drain 30s] [--short] [--out perf/out] [--config FILE] [--keep]
//	    [--backlog N] [--max-batch K] [--private] [--json] [--statements]
//	    [--destination http|rabbitmq|jetstream|redis|mqtt] [--broker-url URL]
//
// The hand-off mode (the default) measures the time from a producer's
// commit to the webhook request arriving at a local receiver with its
// signature verified, and fails when its p95 is above
// perf.webhook_handoff_p95. A producer process appends events at --rate
// for --duration through the producer API (postgres.EventLog.Write), one
// event per transaction, each to the next (space, type) in turn, after a
// one-second warm-up. It writes webhook_handoff.txt (the summary, with
// where the time went from the delivery rows and River's job timestamps)
// and webhook_handoff.png (the latency histogram) into --out.
//
// The backlog mode (--backlog N) measures what draining a backlog costs:
// N events for each subscription are appended in bulk (many per
// transaction, through the same producer API) while no worker runs; then
// one worker is started and timed until every delivery has arrived. With
// --max-batch K, the ordered subscriptions get max_batch K (the column
// must exist in this build) and their receivers take a JSON array of
// envelopes under one signature.
//
// Both modes create a scratch database, migrate it, start a receiver
// process that verifies every signature with the Standard Webhooks
// library and answers 204 at once, and create --subscriptions
// subscriptions spread over --spaces spaces, each filtering one event type
// that --fanout subscriptions of its space share; the last --unordered of
// them have the unordered policy, the rest the default (ordered). The
// worker role (app.Server with the webhooks module, what "bothy server
// --role=worker" runs) runs in this process, which then holds nothing else
// of weight, so this process's CPU time is the worker's. The receiver
// counts, per subscription, deliveries missing, received twice, out of
// seq order on ordered subscriptions, and bad signatures; any of them
// fails the run.
//
// With --destination and a broker kind (deployment mode only), the
// subscriptions deliver to the broker instead (--broker-url, default the
// kind's BOTHY_TEST_<KIND>_URL or the local broker): each publishes to an
// address of its own under a name the run makes up (a RabbitMQ routing
// key on the run's exchange, a JetStream subject of the run's stream, a
// Redis stream key, an MQTT topic), and the receiver process consumes
// every one of them (a queue per subscription with auto-ack, a plain
// subscription, blocking XREADs, QoS 1 subscriptions), verifies each
// message's signature headers over its body with the same library, and
// counts it as the HTTP receiver counts a request. It removes what it
// created when it stops. The broker's own CPU is not measured.
//
// Both report, per delivery, what the worker cost (package cost): the
// round trips of the worker's pool (a pgx tracer), the transactions of the
// scratch database (pg_stat_database) and its statements
// (pg_stat_statements, where loaded), the River delivery jobs created, and
// the CPU time of the worker, the receiver and PostgreSQL, and the WAL
// written. The window runs from before the worker starts to the last
// delivery's arrival (CPU, WAL, time) or the worker's stop (transactions,
// statements, jobs), so it holds the worker's start and stop; in the
// hand-off mode it holds the warm-up too, and the database's figures
// hold the producer's share (its CPU time is given apart). PostgreSQL CPU
// and WAL need a server that serves this run only: --private starts a
// private cluster from the local server binaries with the shared
// server's main settings (the default in the backlog mode); on a shared
// server they are null. --statements prints the statements that took the
// most PostgreSQL time; --json ends the output with one JSON line of the
// figures. The scratch database and private cluster are removed at the
// end unless --keep.
package webhookhandoff

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/loadtest/deploy"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

var (
	// ErrOverBudget is returned when the run failed its checks: the p95 is
	// above the budget, or deliveries were missing, repeated, out of order
	// on an ordered subscription, unexpected, or failed their signature.
	ErrOverBudget = errors.New("webhook hand-off over budget")
	// ErrP95OverBudget is returned (wrapping ErrOverBudget) when the p95 was
	// the only failure.
	ErrP95OverBudget = fmt.Errorf("%w: p95 only", ErrOverBudget)
)

// ChildRoles are the processes the load test starts of its own binary: a
// command runs harness.RunChild(ChildRoles()) first in main, and a test
// binary first in TestMain.
func ChildRoles() map[string]harness.ChildFunc {
	return map[string]harness.ChildFunc{receiverRole: runReceiver, producerRole: runProducer, deploy.ProducerRole: deploy.RunProducer}
}

type options struct {
	*harness.Flags
	subscriptions int
	spaces        int
	fanout        int
	unordered     int
	drain         time.Duration
	out           string
	backlog       int
	maxBatch      int
	// filter is every subscription's filter expression ("": none).
	filter     string
	private    bool
	json       bool
	statements bool

	// The deployment (the default) against --in-process.
	inProcess        bool
	bin              string
	workers          int
	connections      int
	eventsPerRequest int
	pgSettings       harness.Settings
	perfRecord       string

	// destination is the subscriptions' kind; brokerURL the broker of a
	// broker kind.
	destination string
	brokerURL   string
}

// broker is where the subscriptions publish, nil for HTTP receivers;
// without --broker-url the broker is the one the kind's test variable
// (BOTHY_TEST_RABBITMQ_URL, ...) names, or the local one.
func (o *options) broker(environ []string) *brokerParams {
	urls, ok := brokerURLs[o.destination]
	if !ok {
		return nil
	}
	url := o.brokerURL
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, urls[0]+"="); ok && url == "" && v != "" {
			url = v
		}
	}
	if url == "" {
		url = urls[1]
	}
	return newBroker(o.destination, url)
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs, common := harness.NewFlags("webhook_handoff", stderr, &harness.FlagDefaults{
		Rate: "500/s", MaxRate: 20000, Duration: 30 * time.Second, Producers: 16,
		ConfigKeys: "perf.webhook_handoff_p95, river.*, webhooks.*",
		Short:      map[string]string{"duration": "3s", "rate": "100/s", "subscriptions": "8", "spaces": "2", "unordered": "2"},
	})
	o := &options{Flags: common}
	fs.IntVar(&o.subscriptions, "subscriptions", 100, "webhook subscriptions")
	fs.IntVar(&o.spaces, "spaces", 10, "spaces the subscriptions are spread over (unless given, at most --subscriptions)")
	fs.IntVar(&o.fanout, "fanout", 1, "subscriptions each event goes to (they share its space and type)")
	fs.IntVar(&o.unordered, "unordered", 0, "subscriptions with the unordered policy (the rest are ordered)")
	fs.DurationVar(&o.drain, "drain", 30*time.Second, "how long deliveries may still arrive after the load (backlog mode: the whole drain, default 15m); later ones count as missing")
	fs.StringVar(&o.out, "out", filepath.Join("perf", "out"), "directory for webhook_handoff.txt and webhook_handoff.png")
	fs.IntVar(&o.backlog, "backlog", 0, "backlog mode: events per subscription appended before one worker starts and drains them")
	fs.StringVar(&o.filter, "filter", "", "a CEL filter expression every subscription carries (the events' data is {\"n\":1}), to measure what filters cost")
	fs.IntVar(&o.maxBatch, "max-batch", 0, "max_batch of the ordered subscriptions: events per request (0: the column is left alone)")
	fs.BoolVar(&o.private, "private", false, "run on a private PostgreSQL cluster, so its CPU and WAL are this run's (default on in backlog mode)")
	fs.BoolVar(&o.json, "json", false, "end the output with one JSON line of the figures")
	fs.BoolVar(&o.statements, "statements", false, "print the statements that took the most PostgreSQL time (pg_stat_statements)")
	fs.BoolVar(&o.inProcess, "in-process", false, "run the worker (webhooks only) in this process and append over database connections, for profiling; "+
		"the default runs the built binary as separate api and worker processes and POSTs over HTTP")
	fs.StringVar(&o.bin, "bin", "", "the bothy binary to run (default: built from this checkout)")
	fs.IntVar(&o.workers, "workers", 1, "bothy server --role=worker processes")
	fs.IntVar(&o.connections, "connections", 64, "HTTP connections of the producers (requests open at once)")
	fs.IntVar(&o.eventsPerRequest, "events-per-request", 1, "events in each POST")
	fs.StringVar(&o.perfRecord, "perf-record", "", "directory: record the api's and the workers' CPU with perf record during the measured phase (api.perf.data, worker.perf.data)")
	fs.StringVar(&o.destination, "destination", destHTTP, "the subscriptions' destination kind: http (a receiver serving HTTP), or rabbitmq, "+
		"jetstream, redis or mqtt (the run's own exchange, stream, keys or topics on the broker, which the receiver consumes)")
	fs.StringVar(&o.brokerURL, "broker-url", "", "the broker of a broker --destination (default: the kind's BOTHY_TEST_<KIND>_URL, else the local broker)")
	fs.Var(&o.pgSettings, "pg-setting", "a PostgreSQL setting of the private cluster, k=v, on top of PostgreSQL's defaults (repeatable)")
	if err := common.Parse(args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["spaces"] {
		o.spaces = max(1, min(o.spaces, o.subscriptions))
	}
	if !o.inProcess {
		o.private = true
	}
	if o.backlog > 0 {
		o.private = o.private || !set["private"]
		if !set["drain"] {
			o.drain = 15 * time.Minute
		}
	}
	return o, o.validate()
}

func (o *options) validate() error {
	if o.spaces < 1 || o.fanout < 1 || o.drain <= 0 {
		return errors.New("--spaces, --fanout and --drain must be positive")
	}
	if o.subscriptions < o.spaces*o.fanout || o.subscriptions%(o.spaces*o.fanout) != 0 {
		return fmt.Errorf("--subscriptions %d: want a multiple of --spaces times --fanout (%d)", o.subscriptions, o.spaces*o.fanout)
	}
	if o.unordered < 0 || o.unordered > o.subscriptions {
		return fmt.Errorf("--unordered %d: want 0..%d", o.unordered, o.subscriptions)
	}
	if o.backlog < 0 {
		return fmt.Errorf("--backlog %d: want events per subscription, or 0 for the hand-off mode", o.backlog)
	}
	if o.workers < 1 || o.connections < 1 || o.eventsPerRequest < 1 || o.eventsPerRequest > 100 {
		return errors.New("--workers and --connections must be positive, --events-per-request 1..100")
	}
	switch {
	case o.destination != destHTTP && brokerURLs[o.destination] == [2]string{}:
		return fmt.Errorf("--destination %q: want %s, %s, %s, %s or %s", o.destination, destHTTP, destRabbitMQ, destJetStream, destRedis, destMQTT)
	case o.destination != destHTTP && o.inProcess:
		return errors.New("--destination: brokers are measured in the deployment mode only, not with --in-process")
	}
	if o.maxBatch < 0 || o.maxBatch > 1000 {
		return fmt.Errorf("--max-batch %d: want 1..1000, or 0 to leave max_batch alone", o.maxBatch)
	}
	return nil
}

// Run runs the load test with command-line args, writing the summary to
// stdout. It returns an error wrapping ErrOverBudget when the run misses
// the budget or a check, and other errors when the run could not be done;
// the scratch database (and private cluster) are removed in every case
// unless --keep.
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
	switch {
	case o.inProcess && o.backlog > 0:
		return h.runBacklog(ctx)
	case o.inProcess:
		return h.runHandoff(ctx)
	}
	return h.runDeployed(ctx)
}

// start starts the private server if asked, opens the scratch database,
// starts the receiver and seeds the subscriptions; close undoes it.
func start(ctx context.Context, o *options, stdout io.Writer, environ []string) (*handoff, error) {
	h := &handoff{opts: o, stdout: stdout}
	err := h.open(ctx, environ)
	if err == nil {
		h.plan()
		h.broker = o.broker(environ)
		h.rcv, err = startReceiver(ctx, h.endpoints(), h.broker)
	}
	if err == nil {
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

// open starts the private server (--private) and opens the scratch
// database on it, or on the configured server.
func (h *handoff) open(ctx context.Context, environ []string) error {
	o := h.opts
	var server string
	if o.private {
		base, err := config.Load(o.Config, environ, nil)
		if err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		h.private, err = harness.StartPrivate(ctx, &harness.PrivateParams{SharedURL: base.Database.URL, Keep: o.Keep, Stdout: h.stdout,
			Defaults: !o.inProcess, Settings: o.pgSettings.Map()})
		if err != nil {
			return err
		}
		server = h.private.URL()
	}
	var err error
	h.scratch, err = harness.OpenScratch(ctx, &harness.ScratchParams{Tool: "webhook_handoff", ConfigFile: o.Config,
		Environ: environ, ServerURL: server, MaxConns: o.Producers + 4, Keep: o.Keep, Stdout: h.stdout})
	return err
}

func (h *handoff) close(ctx context.Context) {
	if h.rcv != nil {
		h.rcv.stop()
	}
	if h.scratch != nil {
		h.scratch.Close(ctx)
	}
	if h.private != nil {
		h.private.Stop()
	}
}
