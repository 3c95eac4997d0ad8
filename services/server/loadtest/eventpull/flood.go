package eventpull

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// The flood mode (--flood N): what N long polls or streams of one token
// cost the server's other clients. Two phases of --duration each, first
// without the flood and then with it, run the same neighbours: --producers
// clients appending one event per request to the live spaces as fast as
// they are answered (closed loop, so the append rate is what the server
// sustains), and one client reading its space's tail with a plain GET
// (no wait) every neighbourEvery. The flood's token long-polls (or
// streams) a space of its own where nothing is appended; an answer of 429
// is retried after its Retry-After, a finished long poll at once.

const (
	floodSpace = "flood"
	// neighbourEvery paces the neighbour's plain GETs.
	neighbourEvery = 20 * time.Millisecond
	// floodSettle is how long the flood runs before its phase is measured,
	// once every flooder has sent its first request.
	floodSettle = 2 * time.Second
)

// floodResult compares the phases.
type floodResult struct {
	Kind    string      `json:"kind"`
	Waiters int         `json:"waiters"`
	Quiet   phaseResult `json:"without_flood"`
	Flooded phaseResult `json:"with_flood"`
	// P95Ratio is the neighbour's GET p95 with the flood over without it;
	// AppendRatio the append rate with over without.
	P95Ratio    float64     `json:"p95_ratio"`
	AppendRatio float64     `json:"append_ratio"`
	Flood       floodCounts `json:"flood"`
	Load        string      `json:"load_before"`
	LoadAfter   string      `json:"load_after"`
}

// phaseResult is what the neighbours saw in one phase.
type phaseResult struct {
	GETs         int     `json:"gets"`
	P50MS        float64 `json:"get_p50_ms"`
	P95MS        float64 `json:"get_p95_ms"`
	P99MS        float64 `json:"get_p99_ms"`
	Appended     int64   `json:"appended"`
	AppendedPerS float64 `json:"appended_per_s"`
	// Failed counts the neighbours' requests answered other than 2xx or
	// not answered.
	Failed int64 `json:"failed"`
}

// floodCounts are the answers the flood got, by kind.
type floodCounts struct {
	OK       int64 `json:"ok"`
	Limited  int64 `json:"limited_429"`
	Server   int64 `json:"server_5xx"`
	Other    int64 `json:"other"`
	Dropped  int64 `json:"transport_errors"`
	Started  int64 `json:"started"`
	Requests int64 `json:"requests"`
}

// runFlood runs the two phases and reports them.
func runFlood(ctx context.Context, s *harness.Scratch, srv *harness.Worker, p *params, stdout io.Writer) (*floodResult, error) {
	tokens, err := floodTokens(ctx, s, p)
	if err != nil {
		return nil, err
	}
	base := "http://" + srv.Addr
	nb := &neighbours{base: base, read: tokens.reader, write: tokens.writer, spaces: liveSpaces(p.spaces), producers: p.Producers,
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: p.Producers + 4}}}
	res := &floodResult{Kind: p.floodKind, Waiters: p.flood, Load: harness.LoadAvg()}
	if res.Quiet, err = nb.phase(ctx, s, p.Duration); err != nil {
		return nil, err
	}
	fl := &flooder{base: base, token: tokens.flood, kind: p.floodKind,
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: p.flood + 10, MaxConnsPerHost: p.flood + 10}}}
	fctx, stopFlood := context.WithCancel(ctx)
	var wg gosync.WaitGroup
	for range p.flood {
		wg.Go(func() { fl.run(fctx) })
	}
	for fl.counts.Started.Load() < int64(p.flood) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(floodSettle)
	res.Flooded, err = nb.phase(ctx, s, p.Duration)
	stopFlood()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	res.Flood = fl.counts.snapshot()
	res.LoadAfter = harness.LoadAvg()
	if res.Quiet.P95MS > 0 {
		res.P95Ratio = res.Flooded.P95MS / res.Quiet.P95MS
	}
	if res.Quiet.AppendedPerS > 0 {
		res.AppendRatio = res.Flooded.AppendedPerS / res.Quiet.AppendedPerS
	}
	res.report(stdout)
	return res, nil
}

type floodTokenSet struct{ reader, writer, flood string }

// floodTokens makes the neighbours' principal (read and write on the live
// spaces) and the flood's (read on its own space).
func floodTokens(ctx context.Context, s *harness.Scratch, p *params) (*floodTokenSet, error) {
	var out floodTokenSet
	if err := authz.CreatePrincipal(ctx, s.Pool, "perf-neighbour", authz.KindApp); err != nil {
		return nil, err
	}
	for _, sp := range liveSpaces(p.spaces) {
		if err := authz.Grant(ctx, s.Pool, &authz.GrantParams{Space: sp, Principal: "perf-neighbour", Right: authz.RightWrite}); err != nil {
			return nil, err
		}
	}
	_, secret, err := authz.CreateToken(ctx, s.Pool, &authz.CreateTokenParams{Principal: "perf-neighbour",
		Scopes: []string{authz.ScopeEventsRead, authz.ScopeEventsWrite}})
	if err != nil {
		return nil, err
	}
	out.reader, out.writer = secret, secret
	if err := authz.CreatePrincipal(ctx, s.Pool, "perf-flood", authz.KindApp); err != nil {
		return nil, err
	}
	if err := authz.Grant(ctx, s.Pool, &authz.GrantParams{Space: floodSpace, Principal: "perf-flood", Right: authz.RightRead}); err != nil {
		return nil, err
	}
	_, out.flood, err = authz.CreateToken(ctx, s.Pool, &authz.CreateTokenParams{Principal: "perf-flood", Scopes: []string{authz.ScopeEventsRead}})
	return &out, err
}

// neighbours are the clients the flood must not starve.
type neighbours struct {
	base, read, write string
	spaces            []string
	producers         int
	http              *http.Client
}

// phase runs the producers and the reader for d and measures them.
func (nb *neighbours) phase(ctx context.Context, s *harness.Scratch, d time.Duration) (phaseResult, error) {
	head, err := postgres.Head(ctx, s.Pool)
	if err != nil {
		return phaseResult{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var appended, failed atomic.Int64
	var wg gosync.WaitGroup
	for i := range nb.producers {
		wg.Go(func() {
			body := `{"events":[{"type":"item.created","data":{"n":1}}]}`
			for n := i; pctx.Err() == nil; n += nb.producers {
				st, err := nb.do(pctx, http.MethodPost, "/v1/spaces/"+nb.spaces[n%len(nb.spaces)]+"/events", nb.write, body)
				switch {
				case pctx.Err() != nil:
				case err == nil && st == http.StatusCreated:
					appended.Add(1)
				default:
					failed.Add(1)
				}
			}
		})
	}
	var lat []time.Duration
	began := time.Now()
	after := head
	for tick := time.NewTicker(neighbourEvery); pctx.Err() == nil; <-tick.C {
		t0 := time.Now()
		pg, err := (&client{base: nb.base, token: nb.read, http: nb.http}).events(pctx, nb.spaces[0],
			url.Values{"after": {strconv.FormatInt(after, 10)}, "limit": {"50"}})
		if pctx.Err() != nil {
			break
		}
		if err != nil {
			failed.Add(1)
			continue
		}
		lat = append(lat, time.Since(t0))
		if n := len(pg.Events); n > 0 {
			after = pg.Events[n-1].Seq
		}
	}
	took := time.Since(began)
	wg.Wait()
	st := harness.NewStage("neighbour GET", lat)
	return phaseResult{GETs: st.N, P50MS: ms(st.P50), P95MS: ms(st.P95), P99MS: ms(st.P99), Appended: appended.Load(),
		AppendedPerS: float64(appended.Load()) / took.Seconds(), Failed: failed.Load()}, nil
}

// do sends a request with a JSON body ("" for none) and drains the answer.
func (nb *neighbours) do(ctx context.Context, method, path, token, body string) (int, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, nb.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := nb.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	_, err = io.Copy(io.Discard, res.Body)
	return res.StatusCode, err
}

// flooder is the one token's many long polls or streams.
type flooder struct {
	base, token, kind string
	http              *http.Client
	counts            floodCounters
}

type floodCounters struct {
	ok, limited, server, other, dropped, requests atomic.Int64
	Started                                       atomic.Int64
}

func (c *floodCounters) snapshot() floodCounts {
	return floodCounts{OK: c.ok.Load(), Limited: c.limited.Load(), Server: c.server.Load(), Other: c.other.Load(),
		Dropped: c.dropped.Load(), Started: c.Started.Load(), Requests: c.requests.Load()}
}

// run keeps one long poll or stream open until ctx ends.
func (f *flooder) run(ctx context.Context) {
	started := false
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.base+"/v1/spaces/"+floodSpace+"/events?"+f.query(), nil)
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+f.token)
		if f.kind == "stream" {
			req.Header.Set("Accept", "text/event-stream")
		}
		if !started {
			started = true
			f.counts.Started.Add(1)
		}
		f.counts.requests.Add(1)
		res, err := f.http.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				f.counts.dropped.Add(1)
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		_, _ = io.Copy(io.Discard, res.Body) // a stream: until it ends
		res.Body.Close()
		switch {
		case ctx.Err() != nil:
		case res.StatusCode == http.StatusOK:
			f.counts.ok.Add(1)
		case res.StatusCode == http.StatusTooManyRequests:
			f.counts.limited.Add(1)
			secs, _ := strconv.Atoi(res.Header.Get("Retry-After"))
			sleepCtx(ctx, time.Duration(max(secs, 1))*time.Second)
		case res.StatusCode >= 500:
			f.counts.server.Add(1)
			sleepCtx(ctx, time.Second)
		default:
			f.counts.other.Add(1)
			sleepCtx(ctx, time.Second)
		}
	}
}

func (f *flooder) query() string {
	if f.kind == "stream" {
		return "limit=50"
	}
	return "wait=30s&limit=50"
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (r *floodResult) report(w io.Writer) {
	fmt.Fprintf(w, "event_pull --flood: load average %s before, %s after\n", r.Load, r.LoadAfter)
	for _, ph := range []struct {
		name string
		r    phaseResult
	}{{"without flood", r.Quiet}, {fmt.Sprintf("with %d %ss of one token", r.Waiters, r.kindName()), r.Flooded}} {
		fmt.Fprintf(w, "%-34s neighbour GET p50 %.1f ms, p95 %.1f ms, p99 %.1f ms (%d GETs); %d appends, %.0f/s; %d failed\n",
			ph.name+":", ph.r.P50MS, ph.r.P95MS, ph.r.P99MS, ph.r.GETs, ph.r.Appended, ph.r.AppendedPerS, ph.r.Failed)
	}
	fmt.Fprintf(w, "flood/quiet: GET p95 x%.2f, append rate x%.2f\n", r.P95Ratio, r.AppendRatio)
	f := r.Flood
	fmt.Fprintf(w, "the flood's answers: %d ok, %d 429, %d 5xx, %d other, %d transport errors, in %d requests\n",
		f.OK, f.Limited, f.Server, f.Other, f.Dropped, f.Requests)
}

func (r *floodResult) kindName() string {
	if r.Kind == "stream" {
		return "stream"
	}
	return "long poll"
}
