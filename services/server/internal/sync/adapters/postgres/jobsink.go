package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// JobSink implements sync.JobSink with River's InsertManyTx or, with Fast,
// InsertManyFastTx (COPY); both take the round's transaction, so the jobs
// commit with the cursor. The server uses Fast: it is faster at large
// batches and returns only a count, which is all a
// round needs; none of the consumers' jobs use River's unique-job options.
type JobSink struct {
	client *river.Client[pgx.Tx]
	fast   bool
}

var _ sync.JobSink = (*JobSink)(nil)

// JobSinkConfig configures a JobSink.
type JobSinkConfig struct {
	// Fast uses InsertManyFastTx (COPY). Default false.
	Fast bool
}

// NewJobSink returns a sink inserting through client, which may be an
// insert-only client (no queues).
func NewJobSink(client *river.Client[pgx.Tx], cfg *JobSinkConfig) *JobSink {
	s := &JobSink{client: client}
	if cfg != nil {
		s.fast = cfg.Fast
	}
	return s
}

// InsertJobs implements sync.JobSink.
func (s *JobSink) InsertJobs(ctx context.Context, tx pgx.Tx, jobs []sync.Job) (int, error) {
	params := make([]river.InsertManyParams, len(jobs))
	for i, j := range jobs {
		params[i] = river.InsertManyParams{Args: j.Args, InsertOpts: j.Opts}
	}
	if s.fast {
		return s.client.InsertManyFastTx(ctx, tx, params)
	}
	res, err := s.client.InsertManyTx(ctx, tx, params)
	return len(res), err
}
