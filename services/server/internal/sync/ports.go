package sync

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// WriteFunc does a producer's domain writes inside tx and returns the events
// that describe them. It must not commit or roll back tx.
type WriteFunc func(ctx context.Context, tx pgx.Tx) ([]NewEvent, error)

// Producer appends events to the log inside the producer's own transaction.
//
// Write begins a transaction, runs fn, and then — as the last step before
// COMMIT, so the serialized phase holds nothing else — takes the counter,
// inserts the events with their seq and commits. Either the domain writes and
// the events commit together or neither does. Readers are woken after the
// commit. When Write returns nil the commit is durable. An event whose id is
// already in the log is not appended again: Write returns the logged event
// with Duplicate set, or ErrEventIDConflict when the id names a different
// event. Write is safe for concurrent use. On context cancellation before
// the commit is sent the transaction rolls back; an error after that point
// may leave the outcome unknown, as with any COMMIT.
//
// Append appends events that go with no domain writes, as Write with a fn
// that only returns them would, in fewer round trips to the database. It
// sends the COMMIT with its first statements, so an error of the database
// call that is not the server's refusal may leave the outcome unknown,
// context cancellation included (the error says "outcome unknown");
// repeating the call with the same event ids settles it.
type Producer interface {
	Write(ctx context.Context, fn WriteFunc) ([]Event, error)
	Append(ctx context.Context, news []NewEvent) ([]Event, error)
}

// DurabilityBarrier makes what other sessions committed durable before it
// is shown outside the database.
//
// Producers' and rounds' commits are asynchronous: another session can read
// them before their WAL is flushed, and a crash in between takes them back,
// seq and all. Whatever shows the log or what consumers made of it (an API
// answer, a CLI listing, a gauge read from the database at a scrape) reads
// first and calls Durable before showing: it returns once the WAL is
// flushed past every commit visible before the call. Effects sent by jobs
// need no call: the commit that claims a job or a delivery is synchronous
// and flushes the WAL first. Durable is safe for concurrent use; concurrent
// calls share fsyncs.
type DurabilityBarrier interface {
	Durable(ctx context.Context) error
}

// Job is one River job a consumer wants enqueued in its round.
type Job struct {
	Args river.JobArgs
	Opts *river.InsertOpts
}

// Consumer turns committed events into work. Implementations are registered
// with a Worker under their Name, which must match a row in
// event_consumer_cursors.
type Consumer interface {
	// Name is the consumer's cursor name, such as "webhooks".
	Name() string

	// Handle determines the receivers of events (in seq order, at least one)
	// and returns the jobs to enqueue. It may also write rows through tx
	// (delivery records); everything it writes commits or rolls back with the
	// round, together with the cursor. It must not call anything outside the
	// database, since no external call may sit inside a database transaction,
	// and must not commit tx. It is called by one round at a time for a given
	// consumer.
	Handle(ctx context.Context, tx pgx.Tx, events []Event) ([]Job, error)
}

// WorkBudget bounds the work one round creates, beside the number of
// events it reads (consumer.batch_size): a round whose events fan out to
// many receivers would otherwise grow with them, past its timeout.
type WorkBudget struct {
	// Jobs is the most jobs a round inserts (consumer.round_max_jobs).
	Jobs int
	// Receivers is the most receiver rows a round reads or writes, such
	// as one message to one device or one delivery to one subscription
	// (consumer.round_max_receivers).
	Receivers int
}

// ConsumerPrefixHandler is an optional capability of a Consumer, found by
// type assertion, for consumers whose work per event can be large. The
// round calls HandlePrefix instead of Handle. It creates the jobs of the
// leading events[:n] only, staying within budget, and returns n: at least
// one, whatever the first event costs, so every round makes progress, and
// at most len(events). The round advances the cursor past events[n-1]
// only; the next round reads the rest again. Handle's contract holds
// otherwise (only the database, nothing outside it; no commit).
type ConsumerPrefixHandler interface {
	HandlePrefix(ctx context.Context, tx pgx.Tx, events []Event, budget WorkBudget) (jobs []Job, n int, err error)
}

// ConsumerPacer is an optional capability of a Consumer, found by type
// assertion, for consumers that need not run a round for every
// notification: one that keeps a catalog, or one whose rounds cannot make
// work for anyone (push without its keys). Pace is the least time from
// the start of one of its rounds to the start of a round a notification
// wakes; the worker caps it at its poll interval, and rounds that read a
// full batch do not wait. Such a consumer then reads the events of a pace
// in one round, a transaction per pace instead of one per notification,
// and follows the log by up to the pace. Pace is called before each
// notified round, from one goroutine per consumer.
type ConsumerPacer interface {
	Pace() time.Duration
}

// ConsumerLossHandler is an optional capability of a Consumer, found by type
// assertion. HandleLost is told, inside the round's transaction, the exact
// range of seqs that retention removed before the consumer read them. What
// it writes commits with the round that skips the range; an error rolls the
// round back and the range is reported again by the next round.
type ConsumerLossHandler interface {
	HandleLost(ctx context.Context, tx pgx.Tx, consumer string, lost SeqRange) error
}

// Cursor is a consumer's position.
type Cursor struct {
	Name    string
	LastSeq int64
}

// CursorStore reads and moves consumer cursors. All methods act inside the
// round's transaction and are safe for concurrent use by separate
// transactions.
type CursorStore interface {
	// Lock locks the consumer's row without waiting (FOR UPDATE SKIP LOCKED).
	// It returns ErrCursorLocked when another transaction holds it and
	// ErrUnknownConsumer when there is no row. The lock lasts until tx ends.
	Lock(ctx context.Context, tx pgx.Tx, name string) (Cursor, error)
	// Advance stores lastSeq and the round's time; it commits with tx.
	Advance(ctx context.Context, tx pgx.Tx, name string, lastSeq int64) error
}

// EventsAfterParams selects events for a round.
type EventsAfterParams struct {
	// AfterSeq: only events with a larger seq.
	AfterSeq int64
	// Limit: at most this many, in seq order.
	Limit int
}

// EventSource reads the log inside a round's transaction.
type EventSource interface {
	// EventsAfter returns up to Limit events after AfterSeq in seq order.
	// Because the log is gapless and commit-ordered, a gap between AfterSeq
	// and the first returned seq can only come from retention.
	EventsAfter(ctx context.Context, tx pgx.Tx, params *EventsAfterParams) ([]Event, error)
	// LowSeq returns the lowest seq retention has kept: every seq below it
	// was removed.
	LowSeq(ctx context.Context, tx pgx.Tx) (int64, error)
	// EventsAt returns the events at seqs, in seq order and each once (seqs
	// may repeat), in one statement; a seq retention removed has no event
	// in the result.
	EventsAt(ctx context.Context, tx pgx.Tx, seqs []int64) ([]Event, error)
	// QueueEventsAt queues EventsAt's read on b; once b has run, *into
	// holds the events.
	QueueEventsAt(b *pgx.Batch, seqs []int64, into *[]Event)
}

// JobSink inserts jobs inside the round's transaction, so they commit or
// roll back with the cursor. It returns how many it inserted.
type JobSink interface {
	InsertJobs(ctx context.Context, tx pgx.Tx, jobs []Job) (int, error)
}

// TxBeginner starts the round's transaction; *pgxpool.Pool is one.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// RoundBarrier orders a feature's transaction against a consumer's rounds.
// A feature that reads the log head and stores a starting point from it
// (a webhook subscription created "at the head") would otherwise race with
// a round that reads an event committed in between and moves past it.
type RoundBarrier interface {
	// WaitForRound locks the consumer's cursor inside tx: it waits for a
	// round in flight to commit, and rounds that start later wait for tx.
	// It returns the cursor's seq: committed rounds read every event up to
	// it and none after it.
	WaitForRound(ctx context.Context, tx pgx.Tx, consumer string) (int64, error)
}

// ConsumerStatus is one consumer's position against the head of the log.
type ConsumerStatus struct {
	// Name is the consumer's cursor name.
	Name string
	// LastSeq is the cursor: every event up to it was processed.
	LastSeq int64
	// Head is the newest seq the log handed out.
	Head int64
	// Lag is Head - LastSeq, never negative: events not yet processed.
	Lag int64
	// PendingAge is the age of the oldest event after LastSeq still in
	// the log; 0 when there is none.
	PendingAge time.Duration
	// LastRoundAt is when the consumer's last round committed; nil before
	// the first.
	LastRoundAt *time.Time
	// Lost is the range after LastSeq that retention removed before the
	// consumer read it; its next round skips it (Len 0: nothing).
	Lost SeqRange
}

// ConsumerStatusJSON is a ConsumerStatus as operators read it:
// GET /v1/consumers and "bothy consumers status --json".
type ConsumerStatusJSON struct {
	Name              string     `json:"name"`
	LastSeq           int64      `json:"last_seq"`
	Head              int64      `json:"head_seq"`
	Lag               int64      `json:"lag"`
	PendingAgeSeconds float64    `json:"pending_age_seconds"`
	LastRoundAt       *time.Time `json:"last_round_at"`
	// Lost is null when retention removed nothing ahead of the cursor.
	Lost *struct {
		From int64 `json:"from"`
		To   int64 `json:"to"`
	} `json:"lost"`
}

// ConsumerStatusList is the answer to GET /v1/consumers.
type ConsumerStatusList struct {
	Consumers []ConsumerStatusJSON `json:"consumers"`
}

// JSON returns s in its JSON form.
func (s ConsumerStatus) JSON() ConsumerStatusJSON {
	j := ConsumerStatusJSON{Name: s.Name, LastSeq: s.LastSeq, Head: s.Head, Lag: s.Lag,
		PendingAgeSeconds: s.PendingAge.Seconds(), LastRoundAt: s.LastRoundAt}
	if s.Lost.Len() > 0 {
		j.Lost = &struct {
			From int64 `json:"from"`
			To   int64 `json:"to"`
		}{s.Lost.From, s.Lost.To}
	}
	return j
}

// ConsumerStatusReader reads every consumer's status, for operators.
type ConsumerStatusReader interface {
	// ConsumerStatuses returns every consumer's status in name order, read
	// in one statement, so all share one head. What it returns may include
	// commits not yet durable: a caller that shows it calls
	// DurabilityBarrier.Durable first. It stops at context cancellation
	// and is safe for concurrent use.
	ConsumerStatuses(ctx context.Context) ([]ConsumerStatus, error)
}
