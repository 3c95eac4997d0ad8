package eventpull

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// drainFor bounds how long the pollers may take, after the producers
// stopped, to receive what was appended.
const drainFor = 30 * time.Second

// liveResult is what the long-pollers received.
type liveResult struct {
	Appended      int              `json:"appended"`
	AppendedPerS  float64          `json:"appended_per_s"`
	Received      int              `json:"received"`
	ReceivedPerS  float64          `json:"received_per_s"`
	Requests      int64            `json:"requests"`
	CommitToReply harness.Stage    `json:"-"`
	P50MS         float64          `json:"p50_ms"`
	P95MS         float64          `json:"p95_ms"`
	P99MS         float64          `json:"p99_ms"`
	MaxMS         float64          `json:"max_ms"`
	Missing       int              `json:"missing"`
	Duplicates    int              `json:"duplicates"`
	OutOfOrder    int              `json:"out_of_order"`
	acks          map[string]ackAt `json:"-"`
}

// ackAt is an appended event: its space, seq and when its Write returned.
type ackAt struct {
	space string
	seq   int64
	at    time.Time
}

// poller is one long-polling client and what it received.
type poller struct {
	space string
	last  atomic.Int64
	got   []receipt
}

type receipt struct {
	id  string
	seq int64
	at  time.Time
}

// longPollers runs the pollers while the producers append, then checks
// and measures what each poller received.
func longPollers(ctx context.Context, s *harness.Scratch, c *client, p *params) (*liveResult, error) {
	head, err := postgres.Head(ctx, s.Pool)
	if err != nil {
		return nil, err
	}
	spaces := liveSpaces(p.spaces)
	ps := make([]*poller, p.pollers)
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var requests atomic.Int64
	var wg gosync.WaitGroup
	errs := make(chan error, p.pollers)
	for i := range ps {
		ps[i] = &poller{space: spaces[i%len(spaces)]}
		ps[i].last.Store(head)
		wg.Go(func() {
			if err := ps[i].run(pctx, c, &requests); err != nil && pctx.Err() == nil {
				errs <- err
			}
		})
	}
	began := time.Now()
	res, err := produce(ctx, s, p, spaces)
	if err == nil {
		err = awaitAll(ctx, ps, res.acks)
	}
	end := time.Now()
	stop()
	wg.Wait()
	close(errs)
	if err != nil {
		return nil, err
	}
	if err := <-errs; err != nil {
		return nil, err
	}
	res.Requests = requests.Load()
	res.measure(ps, end.Sub(began))
	return res, nil
}

// run long-polls the poller's space from its last seq until ctx ends.
func (pl *poller) run(ctx context.Context, c *client, requests *atomic.Int64) error {
	for ctx.Err() == nil {
		pg, err := c.events(ctx, pl.space, url.Values{"after": {fmt.Sprint(pl.last.Load())}, "wait": {"30s"}, "limit": {"500"}})
		if err != nil {
			return err
		}
		requests.Add(1)
		now := time.Now()
		for _, e := range pg.Events {
			pl.got = append(pl.got, receipt{id: e.ID, seq: e.Seq, at: now})
		}
		if n := len(pg.Events); n > 0 {
			pl.last.Store(pg.Events[n-1].Seq)
		}
	}
	return nil
}

// produce appends rate events/s for the duration, one per transaction,
// to the spaces in turn, and records when each Write returned.
func produce(ctx context.Context, s *harness.Scratch, p *params, spaces []string) (*liveResult, error) {
	log := postgres.NewEventLog(s.Pool, nil)
	defer log.Close()
	began := time.Now()
	acks, err := harness.OpenLoop(ctx, &harness.LoadParams{Rate: p.Rate, Duration: p.Duration, Producers: p.Producers},
		func(ctx context.Context, i int) (ackAt, error) {
			id, _ := uuid.NewV7()
			evs, err := log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
				return []sync.NewEvent{{ID: id, Space: spaces[i%len(spaces)], Type: "item.created", Actor: "perf-writer",
					Data: []byte(`{"n":1}`)}}, nil
			})
			if err != nil {
				return ackAt{}, err
			}
			return ackAt{space: evs[0].Space, seq: evs[0].Seq, at: time.Now()}, nil
		})
	if err != nil {
		return nil, err
	}
	res := &liveResult{Appended: len(acks), AppendedPerS: float64(len(acks)) / time.Since(began).Seconds(), acks: map[string]ackAt{}}
	for _, a := range acks {
		res.acks[fmt.Sprint(a.seq)] = a
	}
	return res, nil
}

// awaitAll waits until every poller has the last event of its space, at
// most drainFor.
func awaitAll(ctx context.Context, ps []*poller, acks map[string]ackAt) error {
	final := map[string]int64{}
	for _, a := range acks {
		final[a.space] = max(final[a.space], a.seq)
	}
	deadline := time.Now().Add(drainFor)
	for _, pl := range ps {
		for pl.last.Load() < final[pl.space] {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return errors.Join(ErrChecks, fmt.Errorf("a poller of %s is at seq %d of %d after %s", pl.space, pl.last.Load(), final[pl.space], drainFor))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// measure checks each poller's events against what was appended to its
// space and takes the commit-to-answer quantiles.
func (r *liveResult) measure(ps []*poller, took time.Duration) {
	bySpace := map[string]int{}
	for _, a := range r.acks {
		bySpace[a.space]++
	}
	var lat []time.Duration
	for _, pl := range ps {
		seen := map[int64]bool{}
		prev := int64(0)
		for _, g := range pl.got {
			a, ok := r.acks[fmt.Sprint(g.seq)]
			switch {
			case !ok || a.space != pl.space:
				continue // appended by the backlog phase, or another space's: not this phase's
			case seen[g.seq]:
				r.Duplicates++
				continue
			case g.seq < prev:
				r.OutOfOrder++
			}
			seen[g.seq], prev = true, g.seq
			r.Received++
			lat = append(lat, g.at.Sub(a.at))
		}
		r.Missing += bySpace[pl.space] - len(seen)
	}
	r.ReceivedPerS = float64(r.Received) / took.Seconds()
	st := harness.NewStage("commit to answer", lat)
	r.CommitToReply = st
	r.P50MS, r.P95MS, r.P99MS = ms(st.P50), ms(st.P95), ms(st.P99)
	if len(lat) > 0 {
		r.MaxMS = ms(lat[len(lat)-1])
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
