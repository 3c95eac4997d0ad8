package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
)

// MaintainArgs is the periodic job that keeps event_log's partitions ahead
// of time and applies retention. River runs periodic jobs on its elected
// leader only, so one worker does it however many run.
type MaintainArgs struct{}

// Kind implements river.JobArgs.
func (MaintainArgs) Kind() string { return "event_log.maintain" }

// InsertOpts keeps at most one pending maintenance job.
func (MaintainArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByPeriod: time.Minute}}
}

// MaintainWorker runs MaintainArgs jobs with a Partitions.
type MaintainWorker struct {
	river.WorkerDefaults[MaintainArgs]
	parts  *Partitions
	logger *slog.Logger
}

// NewMaintainWorker returns the worker of MaintainArgs jobs.
func NewMaintainWorker(parts *Partitions, logger *slog.Logger) *MaintainWorker {
	return &MaintainWorker{parts: parts, logger: logger}
}

// Work runs one maintenance pass. Partitions are created and dropped one
// transaction each, so a pass that fails part-way has still committed some:
// those are logged before the error goes back to River, which retries.
func (w *MaintainWorker) Work(ctx context.Context, job *river.Job[MaintainArgs]) error {
	res, err := w.parts.Maintain(ctx, time.Now())
	if len(res.Created) == 0 && len(res.Dropped) == 0 {
		return err
	}
	if err != nil {
		w.logger.InfoContext(ctx, "event_log maintenance stopped part-way", slog.Any("created", res.Created),
			slog.Any("dropped", res.Dropped))
		return err
	}
	w.logger.InfoContext(ctx, "event_log maintenance", slog.Any("created", res.Created),
		slog.Any("dropped", res.Dropped), slog.Int64("low_seq", res.LowSeq))
	return nil
}
