package webhookhandoff

import (
	"context"
	"errors"
	gosync "sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/dbconn"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// producerRole is the child process that appends the hand-off's events,
// so that the worker's process holds the worker alone.
const producerRole = "webhook_handoff.producer"

// producerParams is one phase of events.
type producerParams struct {
	URL       string        `json:"url"`
	Rate      float64       `json:"rate"`
	Duration  time.Duration `json:"duration"`
	Producers int           `json:"producers"`
	// Targets are the (space, type) pairs; event i goes to target i mod
	// len(Targets).
	Targets [][2]string `json:"targets"`
}

// producerResult is what a phase appended: seqs FirstSeq..LastSeq, all
// of them its own, PerTarget[t] of them to target t, in Seconds.
type producerResult struct {
	Written   int     `json:"written"`
	FirstSeq  int64   `json:"first_seq"`
	LastSeq   int64   `json:"last_seq"`
	PerTarget []int   `json:"per_target"`
	Seconds   float64 `json:"seconds"`
	Error     string  `json:"error,omitempty"`
}

// runProducer is the producer role: it appends one phase of events at the
// rate through the producer API (postgres.EventLog.Append), one event per
// transaction, sends what it appended and ends.
func runProducer(ctx context.Context, cio *harness.ChildIO) error {
	var p producerParams
	if err := cio.Params(&p); err != nil {
		return err
	}
	pc, err := pgxpool.ParseConfig(p.URL)
	if err != nil {
		return err
	}
	pc.MaxConns = int32(p.Producers + 2)
	pc.ConnConfig.RuntimeParams["application_name"] = "bothy-perf-producer"
	dbconn.RegisterTypes(pc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	log := postgres.NewEventLog(pool, nil)
	defer log.Close()
	res := producerResult{PerTarget: make([]int, len(p.Targets))}
	var mu gosync.Mutex
	began := time.Now()
	_, err = harness.OpenLoop(ctx, &harness.LoadParams{Rate: p.Rate, Duration: p.Duration, Producers: p.Producers},
		func(ctx context.Context, i int) (struct{}, error) {
			t := i % len(p.Targets)
			seq, err := writeOne(ctx, log, p.Targets[t])
			if err == nil {
				mu.Lock()
				res.add(t, seq)
				mu.Unlock()
			}
			return struct{}{}, err
		})
	res.Seconds = time.Since(began).Seconds()
	if err != nil {
		res.Error = err.Error()
	}
	return cio.Send(res)
}

func (r *producerResult) add(target int, seq int64) {
	r.Written++
	r.PerTarget[target]++
	if r.FirstSeq == 0 || seq < r.FirstSeq {
		r.FirstSeq = seq
	}
	r.LastSeq = max(r.LastSeq, seq)
}

// writeOne commits one event to target and returns its seq.
func writeOne(ctx context.Context, log *postgres.EventLog, target [2]string) (int64, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return 0, err
	}
	evs, err := log.Append(ctx, []sync.NewEvent{{ID: id, Space: target[0], Type: target[1], Actor: "perf-writer", Data: []byte(`{"n":1}`)}})
	if err != nil {
		return 0, err
	}
	return evs[0].Seq, nil
}

// produce runs one phase in a producer process and returns what it
// appended and the CPU time the process used.
func produce(ctx context.Context, p *producerParams) (*producerResult, time.Duration, error) {
	var res producerResult
	child, err := harness.StartChild(ctx, producerRole, p, &res)
	if err != nil {
		return nil, 0, err
	}
	cpu, err := child.Wait()
	if err == nil && res.Error != "" {
		err = errors.New(res.Error)
	}
	return &res, cpu, err
}
