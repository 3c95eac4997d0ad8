package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

func init() {
	register(command{Name: "events emit", Summary: "append events through the producer API, at a rate and concurrency", Remote: true, Setup: setupEventsEmit})
}

// emitJSON is the summary "bothy events emit --json" prints.
type emitJSON struct {
	Appended  int     `json:"appended"`
	Space     string  `json:"space"`
	HeadSeq   int64   `json:"head_seq"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
}

// parseRate accepts "500", "500/s", "30/m".
func parseRate(s string) (float64, error) {
	if s == "" || s == "0" {
		return 0, nil
	}
	num, unit, _ := strings.Cut(s, "/")
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("--rate %q: want N, N/s or N/m", s)
	}
	switch unit {
	case "", "s":
		return n, nil
	case "m":
		return n / 60, nil
	}
	return 0, fmt.Errorf("--rate %q: want N, N/s or N/m", s)
}

func setupEventsEmit(fs *pflag.FlagSet) func(context.Context, *call) error {
	space := fs.String("space", "", "space the events belong to (required)")
	typ := fs.String("type", "item.changed", "event type")
	actor := fs.String("actor", "cli", "acting principal (on the database; through --server the token's principal acts)")
	data := fs.String("data", "{}", "JSON object for every event's data; the field n is set to the event's number")
	count := fs.Int("count", 1, "events to append")
	rateS := fs.String("rate", "", "events per second overall (N, N/s or N/m); default as fast as possible")
	conc := fs.Int("concurrency", 1, "concurrent producers")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		rate, err := parseRate(*rateS)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if *space == "" || *count < 1 || *conc < 1 {
			return fmt.Errorf("%w: --space is required; --count and --concurrency must be at least 1", errUsage)
		}
		var base map[string]any
		if err := json.Unmarshal([]byte(*data), &base); err != nil || base == nil {
			return fmt.Errorf("%w: --data must be a JSON object", errUsage)
		}
		p := &emitParams{space: *space, typ: *typ, actor: *actor, base: base, count: *count, rate: rate, conc: *conc, asJSON: *asJSON}
		api, err := c.remote.client()
		if err != nil {
			return err
		}
		if api != nil {
			if c.fs.Changed("actor") {
				return fmt.Errorf("%w: --actor needs the database: through --server the token's principal acts", errUsage)
			}
			return emit(ctx, c, p, func(ctx context.Context, i int64) (int64, error) { return emitThroughAPI(ctx, api, p, i) })
		}
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		log := postgres.NewEventLog(pool, nil)
		defer log.Close()
		return emit(ctx, c, p, func(ctx context.Context, i int64) (int64, error) { return emitOne(ctx, log, p, i) })
	}
}

// emitThroughAPI appends the i-th event through the HTTP API and returns
// its seq.
func emitThroughAPI(ctx context.Context, api *apiClient, p *emitParams, i int64) (int64, error) {
	var res sync.AppendResponse
	req := sync.AppendRequest{Events: []sync.NewEventRequest{{Type: p.typ, Data: eventData(p, i)}}}
	if err := api.do(ctx, http.MethodPost, "/v1/spaces/"+url.PathEscape(p.space)+"/events", nil, &req, &res); err != nil {
		return 0, err
	}
	if len(res.Events) != 1 {
		return 0, fmt.Errorf("append: the server answered %d events for 1", len(res.Events))
	}
	return res.Events[0].Seq, nil
}

// emitParams are the parsed flags of "bothy events emit".
type emitParams struct {
	space, typ, actor string
	base              map[string]any
	count, conc       int
	rate              float64
	asJSON            bool
}

// emit appends p.count events with appendOne, which appends the i-th and
// returns its seq, and prints what it did.
func emit(ctx context.Context, c *call, p *emitParams, appendOne func(ctx context.Context, i int64) (int64, error)) error {
	var tick <-chan time.Time
	if p.rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / p.rate))
		defer t.Stop()
		tick = t.C
	}
	start := time.Now()
	head, err := emitAll(ctx, appendOne, p, tick)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	el := time.Since(start)
	if p.asJSON {
		return c.printJSON(emitJSON{Appended: p.count, Space: p.space, HeadSeq: head,
			Seconds: el.Seconds(), PerSecond: float64(p.count) / el.Seconds()})
	}
	fmt.Fprintf(c.stdout, "appended %d events to space %s (head seq %d) in %s, %.0f/s\n", p.count, p.space, head, el.Round(time.Millisecond), float64(p.count)/el.Seconds())
	return nil
}

// emitAll appends p.count events from p.conc writers, each waiting for a
// tick first if tick is not nil, and returns the highest seq appended and
// the first error of a writer. A writer stops at its first error or when
// ctx ends.
func emitAll(ctx context.Context, appendOne func(ctx context.Context, i int64) (int64, error), p *emitParams, tick <-chan time.Time) (int64, error) {
	var next atomic.Int64
	var last atomic.Int64
	var wg gosync.WaitGroup
	errs := make(chan error, p.conc)
	for range p.conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(p.count) {
					return
				}
				if tick != nil {
					select {
					case <-tick:
					case <-ctx.Done():
						return
					}
				}
				seq, err := appendOne(ctx, i)
				if err != nil {
					errs <- err
					return
				}
				for {
					cur := last.Load()
					if seq <= cur || last.CompareAndSwap(cur, seq) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return last.Load(), <-errs
}

// emitOne appends the i-th event, its data p.base with "n": i, and returns
// its seq.
func emitOne(ctx context.Context, log *postgres.EventLog, p *emitParams, i int64) (int64, error) {
	evs, err := log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{{Space: p.space, Type: p.typ, Actor: p.actor, Data: eventData(p, i)}}, nil
	})
	if err != nil {
		return 0, err
	}
	return evs[0].Seq, nil
}

// eventData is the i-th event's data: p.base with "n": i.
func eventData(p *emitParams, i int64) json.RawMessage {
	d := map[string]any{}
	for k, v := range p.base {
		d[k] = v
	}
	d["n"] = i
	raw, _ := json.Marshal(d)
	return raw
}
