package eventpull

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

const (
	denseSpace  = "dense"
	sparseSpace = "sparse"
	fillerSpace = "filler"
	// bulkBatch is how many events one bulk Write appends.
	bulkBatch = 100
)

// pullerResult is what one puller pulled of each space.
type pullerResult struct {
	DenseEvents       int     `json:"dense_events"`
	DensePages        int     `json:"dense_pages"`
	DenseEventsPerS   float64 `json:"dense_events_per_s"`
	SparseEvents      int     `json:"sparse_events"`
	SparsePages       int     `json:"sparse_pages"`
	SparseEventsPerS  float64 `json:"sparse_events_per_s"`
	SparseSeqsPerS    float64 `json:"sparse_seqs_examined_per_s"`
	SparseLogSeqs     int64   `json:"sparse_log_seqs"`
	denseDur, sparDur time.Duration
}

// onePuller appends the backlog, then pulls the dense space and the
// sparse one from the start, each as one client following next_cursor.
func onePuller(ctx context.Context, s *harness.Scratch, c *client, p *params) (*pullerResult, error) {
	log := postgres.NewEventLog(s.Pool, &postgres.EventLogConfig{Notify: postgres.NotifyNone})
	defer log.Close()
	if err := bulk(ctx, log, p.backlog, func(int) string { return denseSpace }); err != nil {
		return nil, err
	}
	first, err := postgres.Head(ctx, s.Pool)
	if err != nil {
		return nil, err
	}
	err = bulk(ctx, log, p.backlog, func(i int) string {
		if i%p.sparse == 0 {
			return sparseSpace
		}
		return fillerSpace
	})
	if err != nil {
		return nil, err
	}
	res := &pullerResult{SparseLogSeqs: int64(p.backlog)}
	if res.DenseEvents, res.DensePages, res.denseDur, err = pullAll(ctx, c, denseSpace, 0); err != nil {
		return nil, err
	}
	if res.SparseEvents, res.SparsePages, res.sparDur, err = pullAll(ctx, c, sparseSpace, first); err != nil {
		return nil, err
	}
	res.DenseEventsPerS = float64(res.DenseEvents) / res.denseDur.Seconds()
	res.SparseEventsPerS = float64(res.SparseEvents) / res.sparDur.Seconds()
	res.SparseSeqsPerS = float64(res.SparseLogSeqs) / res.sparDur.Seconds()
	if res.DenseEvents != p.backlog || res.SparseEvents != (p.backlog+p.sparse-1)/p.sparse {
		return nil, fmt.Errorf("%w: pulled %d dense and %d sparse events", ErrChecks, res.DenseEvents, res.SparseEvents)
	}
	return res, nil
}

// bulk appends n events through the producer API, bulkBatch per
// transaction, event i to space(i).
func bulk(ctx context.Context, log *postgres.EventLog, n int, space func(i int) string) error {
	for from := 0; from < n; from += bulkBatch {
		news := make([]sync.NewEvent, 0, bulkBatch)
		for i := from; i < min(from+bulkBatch, n); i++ {
			news = append(news, sync.NewEvent{Space: space(i), Type: "item.created", Actor: "perf-writer",
				Data: fmt.Appendf(nil, `{"i":%d,"pad":"%0180d"}`, i, 0)})
		}
		if _, err := log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) { return news, nil }); err != nil {
			return fmt.Errorf("append the backlog: %w", err)
		}
	}
	return nil
}

// pullAll pulls space after seq until a page is done.
func pullAll(ctx context.Context, c *client, space string, after int64) (events, pages int, took time.Duration, err error) {
	start := time.Now()
	q := url.Values{"limit": {"500"}, "after": {fmt.Sprint(after)}}
	for {
		pg, err := c.events(ctx, space, q)
		if err != nil {
			return 0, 0, 0, err
		}
		events, pages = events+len(pg.Events), pages+1
		if pg.Done {
			return events, pages, time.Since(start), nil
		}
		q = url.Values{"limit": {"500"}, "cursor": {pg.NextCursor}}
	}
}
