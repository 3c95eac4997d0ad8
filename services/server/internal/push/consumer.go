package push

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// ConsumerName is the push consumer's cursor row (inserted by the baseline migration).
const ConsumerName = "push"

// Queue is the River queue push.deliver jobs run on, apart from the
// webhooks' so a slow webhook target never delays a notification.
const Queue = "push"

// DeliverArgs is one push.deliver job: messages about the events of one
// round to a batch of devices that share a push service. It carries everything
// the messages need, so delivery never reads the events again (an event may
// have left the log by retention when a retry runs).
//
// Jobs made before batching carry one device in RegistrationID and
// Principal and the event in the fields beside them; Work still runs them.
type DeliverArgs struct {
	// Events are the round's events for the batch, each with its devices.
	Events []BatchEvent `json:"events,omitempty"`

	// RegistrationID, Principal, Space, Seq, EventID, Type and CommittedAt
	// are a job of one message, as made before batching.
	RegistrationID uuid.UUID `json:"registration_id,omitzero"`
	Principal      string    `json:"principal,omitempty"`
	Space          string    `json:"space,omitempty"`
	Seq            int64     `json:"seq,omitempty"`
	EventID        uuid.UUID `json:"event_id,omitzero"`
	Type           string    `json:"type,omitempty"`
	CommittedAt    time.Time `json:"committed_at,omitzero"`
}

// BatchEvent is one event of a batch and the devices that get it.
type BatchEvent struct {
	Space   string    `json:"space"`
	Seq     int64     `json:"seq"`
	EventID uuid.UUID `json:"event_id"`
	Type    string    `json:"type"`
	// CommittedAt bounds retries: past push.ttl the message is stale.
	CommittedAt time.Time `json:"committed_at"`
	Devices     Devices   `json:"devices"`
}

// Device is one receiving registration and the principal it belongs to,
// whose rights are checked again at send time.
type Device struct {
	RegistrationID uuid.UUID
	Principal      string
}

// Devices encodes as one JSON string, "id/principal,id/principal,...",
// instead of an array of objects: River indexes every job's args with a
// GIN index, and one string is one index entry where an array would be two
// per device. Principal names cannot hold "," or "/" (authz refuses them);
// should one, it is escaped as in a URL.
type Devices []Device

var principalEscaper = strings.NewReplacer("%", "%25", ",", "%2C", "/", "%2F")

// MarshalJSON implements json.Marshaler.
func (ds Devices) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.Grow(len(ds) * 48)
	for i, d := range ds {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(d.RegistrationID.String())
		b.WriteByte('/')
		b.WriteString(principalEscaper.Replace(d.Principal))
	}
	return json.Marshal(b.String())
}

// UnmarshalJSON implements json.Unmarshaler.
func (ds *Devices) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("push devices: %w", err)
	}
	*ds = nil
	if s == "" {
		return nil
	}
	for entry := range strings.SplitSeq(s, ",") {
		id, p, ok := strings.Cut(entry, "/")
		if !ok {
			return fmt.Errorf("push devices: entry %q: want id/principal", entry)
		}
		rid, err := uuid.Parse(id)
		if err != nil {
			return fmt.Errorf("push devices: entry %q: %w", entry, err)
		}
		principal, err := url.PathUnescape(p)
		if err != nil {
			return fmt.Errorf("push devices: entry %q: %w", entry, err)
		}
		*ds = append(*ds, Device{RegistrationID: rid, Principal: principal})
	}
	return nil
}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return "push.deliver" }

// InsertOpts puts deliveries on their own queue.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: MaxAttempts}
}

// errBadArgs marks a job whose args cannot be read; no retry can help.
var errBadArgs = errors.New("push.deliver args")

// message is one event to one device, the unit a job sends, records and
// retries.
type message struct {
	ev     *BatchEvent
	device Device
}

// messages lists the job's messages, a job of one message made before
// batching included.
func (a *DeliverArgs) messages() ([]message, error) {
	if len(a.Events) == 0 {
		if a.RegistrationID == uuid.Nil {
			return nil, fmt.Errorf("%w: no events and no registration", errBadArgs)
		}
		ev := &BatchEvent{Space: a.Space, Seq: a.Seq, EventID: a.EventID, Type: a.Type, CommittedAt: a.CommittedAt}
		return []message{{ev: ev, device: Device{RegistrationID: a.RegistrationID, Principal: a.Principal}}}, nil
	}
	var msgs []message
	for i := range a.Events {
		for _, d := range a.Events[i].Devices {
			msgs = append(msgs, message{ev: &a.Events[i], device: d})
		}
	}
	return msgs, nil
}

// MaxAttempts bounds the tries of one message; with the backoff of
// DeliverWorker.NextRetry they span about a day, the default push.ttl.
const MaxAttempts = 12

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// Disabled makes the consumer advance without creating jobs (VAPID keys
	// are not configured, so nothing could be sent). Default false.
	Disabled bool
	// BatchSize is the most devices one push.deliver job sends to
	// (push.batch_size). Default 500.
	BatchSize int
}

// Consumer is the sync.Consumer named "push": for each event, the devices
// of every principal who may read the event's space, has not muted it, and
// is not the event's actor receive a message. A round makes one
// push.deliver job per push service origin and batch of up to BatchSize
// devices, which carries the round's events for those devices: a job per
// event would cost River's job lifecycle per event where rounds are many
// and small, and a round gets larger when the consumer falls behind.
type Consumer struct {
	cfg ConsumerConfig
}

var _ sync.Consumer = (*Consumer)(nil)

// NewConsumer returns the push consumer.
func NewConsumer(cfg *ConsumerConfig) *Consumer {
	c := &Consumer{}
	if cfg != nil {
		c.cfg = *cfg
	}
	c.cfg.BatchSize = cmp.Or(c.cfg.BatchSize, 500)
	return c
}

// Name implements sync.Consumer.
func (c *Consumer) Name() string { return ConsumerName }

// receiversSQL finds the receiving devices of a whole batch in one
// statement: the events arrive as arrays, unnested with their position.
// Membership here is the cheap pre-filter (a current right of at least read,
// an active principal); the delivery job asks authz again with the rights
// and token scopes as they are at send time, so this query only
// has to be no narrower than authz. Each device comes with its push
// service's origin (scheme and authority of the endpoint, cut at its
// slashes, cheaper than a regular expression), which groups
// devices into jobs.
const receiversSQL = `
SELECT e.ord, split_part(r.endpoint, '/', 1) || '//' || split_part(r.endpoint, '/', 3), r.id, r.principal
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS e(space, actor, ord)
JOIN space_members m ON m.space = e.space AND m."right" >= 'read' AND m.principal <> e.actor
JOIN principals p ON p.id = m.principal AND p.disabled_at IS NULL
JOIN push_registrations r ON r.principal = m.principal
WHERE NOT EXISTS (
    SELECT 1 FROM push_preferences pp
    WHERE pp.principal = m.principal AND pp.space = e.space AND NOT pp.notify)
ORDER BY e.ord, 2, r.id`

// Handle implements sync.Consumer with one query per batch of events.
func (c *Consumer) Handle(ctx context.Context, tx pgx.Tx, events []sync.Event) ([]sync.Job, error) {
	if c.cfg.Disabled || len(events) == 0 {
		return nil, nil
	}
	spaces := make([]string, len(events))
	actors := make([]string, len(events))
	for i := range events {
		spaces[i], actors[i] = events[i].Space, events[i].Actor
	}
	rows, err := tx.Query(ctx, receiversSQL, spaces, actors)
	if err != nil {
		return nil, fmt.Errorf("push receivers: %w", err)
	}
	defer rows.Close()
	// One job per push service and batch: a job carries the round's events,
	// each with its devices at that push service, up to BatchSize devices.
	type batch struct {
		args    DeliverArgs
		lastOrd int64
		n       int
	}
	var batches []*batch
	open := map[string]*batch{} // the batch being filled, by origin
	for rows.Next() {
		var ord int64
		var origin *string
		var d Device
		if err := rows.Scan(&ord, &origin, &d.RegistrationID, &d.Principal); err != nil {
			return nil, fmt.Errorf("push receivers: %w", err)
		}
		key := ""
		if origin != nil {
			key = *origin
		}
		b := open[key]
		if b == nil || b.n == c.cfg.BatchSize {
			b = &batch{}
			open[key] = b
			batches = append(batches, b)
		}
		if len(b.args.Events) == 0 || b.lastOrd != ord {
			e := &events[ord-1]
			b.args.Events = append(b.args.Events, BatchEvent{Space: e.Space, Seq: e.Seq, EventID: e.ID, Type: e.Type, CommittedAt: e.CommittedAt})
			b.lastOrd = ord
		}
		be := &b.args.Events[len(b.args.Events)-1]
		be.Devices = append(be.Devices, d)
		b.n++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("push receivers: %w", err)
	}
	jobs := make([]sync.Job, len(batches))
	for i, b := range batches {
		jobs[i] = sync.Job{Args: b.args}
	}
	return jobs, nil
}
