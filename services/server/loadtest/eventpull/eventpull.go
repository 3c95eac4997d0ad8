// Package eventpull is the load test of pulling events over HTTP
// (GET /v1/spaces/{space}/events). The command perf/event_pull only calls
// Run.
//
//	go run ./perf/event_pull [--backlog 100000] [--sparse 10] [--rate 500/s] [--duration 20s] [--pollers 100]
//	    [--spaces 10] [--producers 4] [--short] [--json] [--config FILE] [--keep]
//	go run ./perf/event_pull --flood 1000 [--flood-kind poll|stream] [--flood-limit N] [--duration 20s] [--producers 4] ...
//
// It creates a scratch database, runs the api role (app.Server, what
// "bothy server --role=api" runs, with its own LISTEN connection) in this
// process, and measures two things:
//
//   - One puller: --backlog events are appended in bulk to one space, and
//     as many again spread so that the space holds one event in --sparse;
//     one client then pulls each space from the start with limit=500,
//     following next_cursor, and the run reports events/s and pages.
//   - Long-pollers: --pollers clients, spread over --spaces spaces, each
//     loop on GET ...?after=<its last seq>&wait=30s&limit=500 while
//     --producers goroutines append --rate events/s (one per transaction,
//     through the producer API) to the spaces in turn for --duration. Each
//     poller must get every event of its space once, in seq order. The run
//     reports the events/s the pollers received and the time from each
//     event's acknowledged commit (its Write returning) to each poller's
//     answer holding it: p50, p95, p99, max.
//
// With --flood N it measures instead what N long polls (or streams) of one
// token cost the others: a neighbour's plain GET p95 and the append rate
// over HTTP, without and with the flood (flood.go).
//
// The clients, the producers and the server share this process and the
// machine, so the figures hold the clients' cost too; the summary states
// the machine's load average.
package eventpull

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// ErrChecks is returned when a poller missed an event, got one twice or
// out of order, or the run failed.
var ErrChecks = errors.New("event pull checks failed")

// params are the run's flags.
type params struct {
	*harness.Flags
	backlog, sparse, pollers, spaces int
	json                             bool
	// flood is the number of long polls or streams of the flood mode (0:
	// off), floodKind "poll" or "stream".
	flood     int
	floodKind string
	// floodLimit, if set, is server.max_event_waiters_per_token.
	floodLimit int
}

func parse(args []string, stdout io.Writer) (*params, error) {
	fs, f := harness.NewFlags("event_pull", stdout, &harness.FlagDefaults{Rate: "500/s", MaxRate: 20000, Duration: 20 * time.Second,
		Producers: 4, ConfigKeys: "database.url",
		Short: map[string]string{"rate": "50/s", "duration": "3s", "backlog": "2000", "pollers": "10", "spaces": "5"}})
	p := &params{Flags: f}
	fs.IntVar(&p.backlog, "backlog", 100_000, "events of the one puller's dense space (and as many again for its sparse one)")
	fs.IntVar(&p.sparse, "sparse", 10, "the sparse space holds one event in this many")
	fs.IntVar(&p.pollers, "pollers", 100, "long-polling clients")
	fs.IntVar(&p.spaces, "spaces", 10, "spaces the long-pollers and producers use")
	fs.BoolVar(&p.json, "json", false, "end with one JSON line of the figures")
	fs.IntVar(&p.flood, "flood", 0, "flood mode: this many long polls (or streams) of one token; a neighbour's GET p95 and the append rate without and with them")
	fs.StringVar(&p.floodKind, "flood-kind", "poll", "what the flood holds open: poll (wait=30s) or stream (text/event-stream)")
	fs.IntVar(&p.floodLimit, "flood-limit", 0, "server.max_event_waiters_per_token for the run (0: the configured one), e.g. --flood to let the whole flood in")
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	if p.backlog < 1 || p.sparse < 1 || p.pollers < 1 || p.spaces < 1 || p.flood < 0 || p.floodLimit < 0 {
		return nil, errors.New("--backlog, --sparse, --pollers and --spaces must be positive, --flood and --flood-limit not negative")
	}
	if p.floodKind != "poll" && p.floodKind != "stream" {
		return nil, fmt.Errorf("--flood-kind %q: want poll or stream", p.floodKind)
	}
	return p, nil
}

// Run runs the load test with args and writes its report to stdout.
func Run(ctx context.Context, args []string, stdout io.Writer, environ []string) error {
	p, err := parse(args, stdout)
	if err != nil {
		return err
	}
	keys := map[string]string{"server.role": "api"}
	if p.floodLimit > 0 {
		keys["server.max_event_waiters_per_token"] = strconv.Itoa(p.floodLimit)
		keys["server.max_event_waiters"] = strconv.Itoa(max(p.floodLimit, 10_000))
	}
	s, err := harness.OpenScratch(ctx, &harness.ScratchParams{Tool: "event_pull", ConfigFile: p.Config, Environ: environ,
		Keys: keys, MaxConns: p.Producers + 8, Keep: p.Keep, Stdout: stdout})
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	srv, err := harness.StartWorker(ctx, &harness.WorkerParams{Cfg: s.Cfg, Logger: s.Logger, Modules: app.Features(s.Cfg)})
	if err != nil {
		return err
	}
	defer srv.Stop()
	if p.flood > 0 {
		return floodRun(ctx, s, srv, p, stdout)
	}
	token, err := reader(ctx, s, p)
	if err != nil {
		return err
	}
	c := &client{base: "http://" + srv.Addr, token: token, http: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: p.pollers + 10, MaxConnsPerHost: p.pollers + 10}}}
	res := &result{Load: harness.LoadAvg()}
	if res.Puller, err = onePuller(ctx, s, c, p); err != nil {
		return err
	}
	if res.Live, err = longPollers(ctx, s, c, p); err != nil {
		return err
	}
	res.LoadAfter = harness.LoadAvg()
	res.report(stdout)
	if p.json {
		line, _ := json.Marshal(res)
		fmt.Fprintf(stdout, "%s\n", line)
	}
	if res.Live.Missing+res.Live.Duplicates+res.Live.OutOfOrder > 0 {
		return fmt.Errorf("%w: %d missing, %d twice, %d out of order", ErrChecks, res.Live.Missing, res.Live.Duplicates, res.Live.OutOfOrder)
	}
	return nil
}

// floodRun runs the flood mode and ends the run with its JSON line.
func floodRun(ctx context.Context, s *harness.Scratch, srv *harness.Worker, p *params, stdout io.Writer) error {
	res, err := runFlood(ctx, s, srv, p, stdout)
	if err != nil {
		return err
	}
	if p.json {
		line, _ := json.Marshal(map[string]any{"flood": res})
		fmt.Fprintf(stdout, "%s\n", line)
	}
	if res.Flood.Server > 0 {
		return fmt.Errorf("%w: %d answers of 5xx to the flood", ErrChecks, res.Flood.Server)
	}
	return nil
}

// reader makes the principal the clients pull as: read on every space of
// the run, a token with events:read.
func reader(ctx context.Context, s *harness.Scratch, p *params) (string, error) {
	if err := authz.CreatePrincipal(ctx, s.Pool, "perf-reader", authz.KindApp); err != nil {
		return "", err
	}
	spaces := append([]string{denseSpace, sparseSpace}, liveSpaces(p.spaces)...)
	for _, sp := range spaces {
		if err := authz.Grant(ctx, s.Pool, &authz.GrantParams{Space: sp, Principal: "perf-reader", Right: authz.RightRead}); err != nil {
			return "", err
		}
	}
	_, secret, err := authz.CreateToken(ctx, s.Pool, &authz.CreateTokenParams{Principal: "perf-reader", Scopes: []string{authz.ScopeEventsRead}})
	return secret, err
}

func liveSpaces(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("live-%d", i)
	}
	return out
}
