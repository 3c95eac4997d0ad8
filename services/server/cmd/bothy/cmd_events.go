package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

func init() {
	register(command{Name: "events emit", Summary: "append events through the producer API (--space --type --count --rate --concurrency)", Run: runEventsEmit})
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

func runEventsEmit(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("events emit", e)
	space := fs.String("space", "", "space the events belong to (required)")
	typ := fs.String("type", "item.changed", "event type")
	actor := fs.String("actor", "cli", "acting principal")
	data := fs.String("data", "{}", "JSON object for every event's data; the field n is set to the event's number")
	count := fs.Int("count", 1, "events to append")
	rateS := fs.String("rate", "", "events per second overall (N, N/s or N/m); default as fast as possible")
	conc := fs.Int("concurrency", 1, "concurrent producers")
	load := configFlags(fs, e)
	if err := fs.Parse(args); err != nil {
		return err
	}
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
	cfg, err := load()
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	pool, err := app.OpenPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	log := postgres.NewEventLog(pool, nil)
	defer log.Close()

	var next atomic.Int64
	var first, last atomic.Int64
	var tick <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		tick = t.C
	}
	start := time.Now()
	var wg gosync.WaitGroup
	errs := make(chan error, *conc)
	for range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(*count) {
					return
				}
				if tick != nil {
					select {
					case <-tick:
					case <-ctx.Done():
						return
					}
				}
				d := map[string]any{}
				for k, v := range base {
					d[k] = v
				}
				d["n"] = i
				raw, _ := json.Marshal(d)
				evs, err := log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
					return []sync.NewEvent{{Space: *space, Type: *typ, Actor: *actor, Data: raw}}, nil
				})
				if err != nil {
					errs <- err
					return
				}
				first.CompareAndSwap(0, evs[0].Seq)
				for {
					cur := last.Load()
					if evs[0].Seq <= cur || last.CompareAndSwap(cur, evs[0].Seq) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	el := time.Since(start)
	fmt.Fprintf(e.stdout, "appended %d events to space %s (head seq %d) in %s, %.0f/s\n", *count, *space, last.Load(), el.Round(time.Millisecond), float64(*count)/el.Seconds())
	return nil
}
