package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	gosync "sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// Operational events: what happens to a subscription, appended to the log
// of its space so that other subscriptions (and anything reading the log)
// learn of it. Their data is a NoticeData.
const (
	// TypeDisabled: the subscription was disabled by bothy (cause gone or
	// failing). Disabling by hand appends nothing: whoever did it knows.
	TypeDisabled = "bothy.webhook.disabled"
	// TypeFailing: a delivery attempt failed after a success (or since
	// the subscription was created or enabled).
	TypeFailing = "bothy.webhook.failing"
	// TypeRecovered: an attempt succeeded after failures.
	TypeRecovered = "bothy.webhook.recovered"
	// TypeGap: events the subscription should have received left the log
	// first; it is disabled with cause gap.
	TypeGap = "bothy.webhook.gap"
	// TypeUpdated: the owner changed the subscription's filter or
	// transform; the detail names which, never their text.
	TypeUpdated = "bothy.webhook.updated"
	// OperationalPrefix begins every operational event type (and the test
	// message's). The HTTP API refuses it for events clients append, so a
	// receiver can trust that such an event comes from bothy.
	OperationalPrefix = "bothy.webhook."
)

// IsOperational says whether typ is an operational event type.
func IsOperational(typ string) bool { return strings.HasPrefix(typ, OperationalPrefix) }

// NoticeData is the data of an operational event.
type NoticeData struct {
	SubscriptionID uuid.UUID `json:"subscription_id"`
	// Cause is the subscription's disabled cause (gap, failing, gone) for
	// bothy.webhook.disabled and bothy.webhook.gap, "" otherwise.
	Cause string `json:"cause,omitempty"`
	// Detail says what happened, as the subscription's disabled_detail or
	// the attempt's error; it names no URL and no header value.
	Detail string `json:"detail,omitempty"`
	// Seq is the seq of the delivery that changed the state, or the first
	// seq the subscription will not receive (gap).
	Seq int64 `json:"seq"`
}

// KindNotice is the job kind that appends an operational event.
const KindNotice = "webhook_out.notice"

// NoticeArgs is one operational event to append. Everything the event is
// made of is fixed when the job is inserted, its id included, so a job that
// runs again (its process died after the append, or the append's answer was
// lost) appends nothing more: the log takes an event id once.
type NoticeArgs struct {
	EventID    uuid.UUID       `json:"event_id"`
	Space      string          `json:"space"`
	Type       string          `json:"type"`
	OccurredAt time.Time       `json:"occurred_at"`
	Data       json.RawMessage `json:"data"`
}

// Kind implements river.JobArgs.
func (NoticeArgs) Kind() string { return KindNotice }

// InsertOpts puts notices on the webhooks queue.
func (NoticeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 25}
}

// newNotice returns the job of one operational event about subscription
// subID on space.
func newNotice(typ, space string, subID uuid.UUID, cause, detail string, seq int64) (NoticeArgs, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return NoticeArgs{}, err
	}
	data, err := json.Marshal(NoticeData{SubscriptionID: subID, Cause: cause, Detail: detail, Seq: seq})
	if err != nil {
		return NoticeArgs{}, err
	}
	return NoticeArgs{EventID: id, Space: space, Type: typ, OccurredAt: time.Now().UTC().Truncate(time.Microsecond), Data: data}, nil
}

// txInserter is a River client that can only insert, inside a caller's
// transaction (a driver without a pool). It serves the delivery job and the
// round alike. The job's own client (river.ClientFromContext) would refuse
// a kind its process has no worker for, and a delivery must not fail
// because notices are worked elsewhere; the process with the notice worker
// (the webhooks module's) picks them up.
var txInserter = gosync.OnceValues(func() (*river.Client[pgx.Tx], error) {
	return river.NewClient(riverpgxv5.New(nil), &river.Config{})
})

// insertNotices inserts notice jobs in tx, so they exist exactly when the
// state change that caused them commits (River's transactional outbox).
func insertNotices(ctx context.Context, tx pgx.Tx, notices []NoticeArgs) error {
	if len(notices) == 0 {
		return nil
	}
	client, err := txInserter()
	if err != nil {
		return fmt.Errorf("river inserter: %w", err)
	}
	params := make([]river.InsertManyParams, len(notices))
	for i := range notices {
		params[i] = river.InsertManyParams{Args: notices[i]}
	}
	if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("insert %d operational events: %w", len(notices), err)
	}
	return nil
}

// NoteChange inserts, in tx, the job of operational event typ about subID
// if ct (the statement that was to change the subscription's state) changed
// its row: a disable of a subscription that was disabled already appends
// nothing.
func NoteChange(ctx context.Context, tx pgx.Tx, ct pgconn.CommandTag, typ string, subID uuid.UUID, cause, detail string, seq int64) error {
	if ct.RowsAffected() == 0 {
		return nil
	}
	var space string
	if err := tx.QueryRow(ctx, `SELECT space FROM webhook_subscriptions WHERE id = $1`, subID).Scan(&space); err != nil {
		return fmt.Errorf("operational event %s for %s: %w", typ, subID, err)
	}
	n, err := newNotice(typ, space, subID, cause, detail, seq)
	if err != nil {
		return err
	}
	return insertNotices(ctx, tx, []NoticeArgs{n})
}

// markFailingSQL marks a subscription failing unless it is already, and
// says whether it changed and on which space.
const markFailingSQL = `
UPDATE webhook_subscriptions SET failing_since = now() WHERE id = $1 AND failing_since IS NULL RETURNING space`

// NoteFailed records that an attempt at the delivery of seq failed: the
// first failure after a success marks the subscription failing and appends
// bothy.webhook.failing.
//
// Attempts at operational events do not count, here or when a success
// clears the mark; the caller does not call it for them.
// Every operational event is a delivery for the other matching
// subscriptions of its space, and a delivery's outcome can change a
// subscription's state; if those attempts counted, two flaky receivers on
// one space could answer each other's failing and recovered events for
// ever. As it is, an operational event can only be followed by a
// subscription's disabling, which takes an enable by hand to happen again
// (TestNotice_NoLoopBetweenFlakySubscriptions). A subscription is also not
// sent operational events about itself (the round skips them).
func NoteFailed(ctx context.Context, tx pgx.Tx, subID uuid.UUID, detail string, seq int64) error {
	var space string
	err := tx.QueryRow(ctx, markFailingSQL, subID).Scan(&space)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // failing already
	}
	if err != nil {
		return fmt.Errorf("mark %s failing: %w", subID, err)
	}
	return InsertNotice(ctx, tx, TypeFailing, space, subID, "", detail, seq)
}

// InsertNotice inserts, in tx, the job of one operational event about
// subscription subID on space.
func InsertNotice(ctx context.Context, tx pgx.Tx, typ, space string, subID uuid.UUID, cause, detail string, seq int64) error {
	n, err := newNotice(typ, space, subID, cause, detail, seq)
	if err != nil {
		return err
	}
	return insertNotices(ctx, tx, []NoticeArgs{n})
}

// NoticeWorker appends operational events through the producer. It is the
// River worker of webhook_out.notice.
type NoticeWorker struct {
	river.WorkerDefaults[NoticeArgs]
	events sync.Producer
	// afterAppend, if set, runs after a successful append; a test makes
	// the job fail there to show that the retry appends nothing more.
	afterAppend func(job *river.Job[NoticeArgs]) error
}

// NewNoticeWorker returns the worker; events appends to the log.
func NewNoticeWorker(events sync.Producer) *NoticeWorker {
	return &NoticeWorker{events: events}
}

// Work implements river.Worker. An event id already in the log is not
// appended again (sync.Producer), so a rerun of a job that appended is a
// no-op; an id that names another event cannot come from these jobs and
// cancels the job rather than retrying it.
func (w *NoticeWorker) Work(ctx context.Context, job *river.Job[NoticeArgs]) error {
	a := job.Args
	ev := sync.NewEvent{ID: a.EventID, Space: a.Space, Type: a.Type, Actor: SystemActor, OccurredAt: a.OccurredAt, Data: a.Data}
	_, err := w.events.Append(ctx, []sync.NewEvent{ev})
	if errors.Is(err, sync.ErrEventIDConflict) {
		return river.JobCancel(fmt.Errorf("operational event %s: %w", a.EventID, err))
	}
	if err != nil {
		return fmt.Errorf("append operational event %s %s: %w", a.Type, a.EventID, err)
	}
	if w.afterAppend != nil {
		return w.afterAppend(job)
	}
	return nil
}
