package push

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// PageArgs is one push.page job: events of one space whose devices are
// too many for a round, and where the previous page ended. Its run reads
// the next page of the space's receiving devices, by key, and turns it
// into push.deliver jobs; the job of the page after it is inserted in the
// same transaction that completes this one, so every page job exists once
// and every device is on exactly one page.
type PageArgs struct {
	Space  string      `json:"space"`
	Events []PageEvent `json:"events"`
	// AfterPrincipal and AfterRegistration are the key of the last device
	// of the page before; empty on the first page.
	AfterPrincipal    string    `json:"after_principal,omitempty"`
	AfterRegistration uuid.UUID `json:"after_registration,omitzero"`
}

// PageEvent is one event of a page job.
type PageEvent struct {
	Seq         int64     `json:"seq"`
	EventID     uuid.UUID `json:"event_id"`
	Type        string    `json:"type"`
	CommittedAt time.Time `json:"committed_at"`
	// Actor caused the event and gets no message about it.
	Actor string `json:"actor"`
}

// Kind implements river.JobArgs.
func (PageArgs) Kind() string { return "push.page" }

// InsertOpts puts pages on the push queue, ahead of the deliveries they
// made (lower ids), so a page job waits for a free worker, not for them.
func (PageArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: MaxAttempts}
}

// EventSeq implements sync.EventArgs: the page joins its first event's
// trace, and so do the jobs it makes.
func (a PageArgs) EventSeq() int64 {
	if len(a.Events) == 0 {
		return 0
	}
	return a.Events[0].Seq
}

var _ sync.EventArgs = PageArgs{}

// pageMembersSQL reads the next members of a space, from a principal on,
// in the order of space_members' primary key: an index range of at most
// $3 rows, whatever the size of the space.
const pageMembersSQL = `
SELECT m.principal FROM space_members m
WHERE m.space = $1 AND m."right" >= 'read' AND m.principal >= $2
ORDER BY m.principal
LIMIT $3`

// pageDevicesSQL reads the receiving devices of those members after a key,
// in key order: the round's pre-filter (spaceDevicesSQL) for them.
const pageDevicesSQL = `
SELECT m.principal, r.id, split_part(r.endpoint, '/', 1) || '//' || split_part(r.endpoint, '/', 3)
FROM unnest($1::text[]) AS m(principal)
JOIN principals p ON p.id = m.principal AND p.disabled_at IS NULL
JOIN push_registrations r ON r.principal = m.principal
WHERE (m.principal, r.id) > ($2, $3)
  AND NOT EXISTS (
    SELECT 1 FROM push_preferences pp
    WHERE pp.principal = m.principal AND pp.space = $4 AND NOT pp.notify)
ORDER BY m.principal, r.id
LIMIT $5`

// lastRegistration sorts after every registration id: a key of a member
// and it stands after all of that member's devices.
var lastRegistration = uuid.UUID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// pageTimeout bounds a page job's transaction, well below River's rescue
// of jobs that run for a minute.
const pageTimeout = 30 * time.Second

// PageWorker is the River worker of push.page.
type PageWorker struct {
	river.WorkerDefaults[PageArgs]
	db  TxBeginner
	cfg ConsumerConfig
}

// TxBeginner begins the page job's transaction; *pgxpool.Pool is one.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// NewPageWorker returns the worker of push.page; cfg is the consumer's.
func NewPageWorker(db TxBeginner, cfg *ConsumerConfig) *PageWorker {
	return &PageWorker{db: db, cfg: cfg.withDefaults()}
}

// Timeout implements river.Worker.
func (w *PageWorker) Timeout(*river.Job[PageArgs]) time.Duration { return pageTimeout }

// Work implements river.Worker: in one transaction, read the page, insert
// its push.deliver jobs and the next page's job, and complete this job.
// Nothing leaves the database, so a failed run leaves nothing behind and
// River runs it again.
func (w *PageWorker) Work(ctx context.Context, job *river.Job[PageArgs]) error {
	return pgx.BeginFunc(ctx, w.db, func(tx pgx.Tx) error {
		page, next, err := readPage(ctx, tx, &job.Args, w.cfg.PageSize)
		if err != nil {
			return err
		}
		params, err := w.pageJobs(job, page, next)
		if err != nil {
			return err
		}
		if len(params) > 0 {
			if _, err := river.ClientFromContext[pgx.Tx](ctx).InsertManyFastTx(ctx, tx, params); err != nil {
				return fmt.Errorf("push page of %q: insert %d jobs: %w", job.Args.Space, len(params), err)
			}
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("push page of %q: complete: %w", job.Args.Space, err)
		}
		return nil
	})
}

// readPage reads up to size receiving devices of a's space after a's key,
// from at most size members, and returns them with the job of the page
// after, or nil when the space has no more members. Reading members first
// keeps a page's work bounded however the planner would order a join of
// the whole space.
func readPage(ctx context.Context, tx pgx.Tx, a *PageArgs, size int) ([]receiver, *PageArgs, error) {
	rows, err := tx.Query(ctx, pageMembersSQL, a.Space, a.AfterPrincipal, size)
	if err != nil {
		return nil, nil, fmt.Errorf("push page of %q: members: %w", a.Space, err)
	}
	members, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(members) == 0 {
		return nil, nil, err
	}
	rows, err = tx.Query(ctx, pageDevicesSQL, members, a.AfterPrincipal, [16]byte(a.AfterRegistration), a.Space, size)
	if err != nil {
		return nil, nil, fmt.Errorf("push page of %q: devices: %w", a.Space, err)
	}
	page, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (receiver, error) {
		var rc receiver
		var origin *string
		err := row.Scan(&rc.device.Principal, &rc.device.RegistrationID, &origin)
		if origin != nil {
			rc.origin = *origin
		}
		return rc, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("push page of %q: devices: %w", a.Space, err)
	}
	next := *a
	switch {
	case len(page) == size: // the last device's member may have more
		last := page[len(page)-1].device
		next.AfterPrincipal, next.AfterRegistration = last.Principal, last.RegistrationID
	case len(members) == size: // every device of these members is on this page
		next.AfterPrincipal, next.AfterRegistration = members[len(members)-1], lastRegistration
	default:
		return page, nil, nil
	}
	return page, &next, nil
}

// pageJobs returns the jobs a page makes: the next page's first, if there
// is one, then one push.deliver job per push service and batch. They carry
// the page job's trace context.
func (w *PageWorker) pageJobs(job *river.Job[PageArgs], page []receiver, next *PageArgs) ([]river.InsertManyParams, error) {
	opts, err := traceOpts(job.Metadata)
	if err != nil {
		return nil, err
	}
	var params []river.InsertManyParams
	if next != nil {
		params = append(params, river.InsertManyParams{Args: *next, InsertOpts: opts})
	}
	b := newBatcher(w.cfg.BatchSize)
	for _, e := range job.Args.Events {
		b.add(&BatchEvent{Space: job.Args.Space, Seq: e.Seq, EventID: e.EventID, Type: e.Type, CommittedAt: e.CommittedAt}, page, e.Actor)
	}
	for _, bt := range b.out {
		params = append(params, river.InsertManyParams{Args: bt.args, InsertOpts: opts})
	}
	return params, nil
}

// traceOpts carries the trace context of a job's metadata into the jobs
// it inserts; nil when it has none.
func traceOpts(metadata []byte) (*river.InsertOpts, error) {
	var meta map[string]any
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &meta); err != nil {
			return nil, fmt.Errorf("push page: job metadata: %w", err)
		}
	}
	tp, ok := meta["traceparent"].(string)
	if !ok {
		return nil, nil
	}
	b, err := json.Marshal(map[string]string{"traceparent": tp})
	if err != nil {
		return nil, err
	}
	return &river.InsertOpts{Metadata: b}, nil
}
