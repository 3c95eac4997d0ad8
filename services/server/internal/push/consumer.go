package push

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
	// BatchSize is the most messages (an event to a device) one
	// push.deliver job sends (push.batch_size). Default 500.
	BatchSize int
	// PageSize is the most members and receiving devices of a space a
	// round reads for its events: a space with more of either is paged
	// through by push.page jobs, each reading at most this many members
	// and devices. Default 1000.
	PageSize int
	// PageEvents is the most events of one space a push.page job carries.
	// Default 20.
	PageEvents int
}

func (c *ConsumerConfig) withDefaults() ConsumerConfig {
	out := ConsumerConfig{}
	if c != nil {
		out = *c
	}
	out.BatchSize = cmp.Or(out.BatchSize, 500)
	out.PageSize = cmp.Or(out.PageSize, 1000)
	out.PageEvents = cmp.Or(out.PageEvents, 20)
	return out
}

// Consumer is the sync.Consumer named "push": for each event, the devices
// of every principal who may read the event's space, has not muted it, and
// is not the event's actor receive a message. A round makes one
// push.deliver job per push service origin and batch of up to BatchSize
// messages, which carries the round's events for those devices: a job per
// event would cost River's job lifecycle per event where rounds are many
// and small, and a round gets larger when the consumer falls behind.
//
// A round's work is bounded (sync.ConsumerPrefixHandler): it reads at most
// PageSize+1 members and devices per space, and stops before the event
// that would take it past its budget of receivers or jobs. A space with
// more than PageSize members or devices is not delivered by the round: its
// events go into push.page jobs (PageWorker), which page through its
// devices, so one event to any number of devices costs a round one job.
type Consumer struct {
	cfg ConsumerConfig
}

var (
	_ sync.Consumer              = (*Consumer)(nil)
	_ sync.ConsumerPrefixHandler = (*Consumer)(nil)
	_ sync.ConsumerPacer         = (*Consumer)(nil)
)

// Pace implements sync.ConsumerPacer: with push off, rounds make no jobs
// and only keep the cursor at the head, so they run on the worker's poll
// interval alone instead of for every notification.
func (c *Consumer) Pace() time.Duration {
	if c.cfg.Disabled {
		return time.Hour
	}
	return 0
}

// NewConsumer returns the push consumer.
func NewConsumer(cfg *ConsumerConfig) *Consumer {
	return &Consumer{cfg: cfg.withDefaults()}
}

// Name implements sync.Consumer.
func (c *Consumer) Name() string { return ConsumerName }

// spaceDevicesSQL reads, for each space in $1, up to $2 of its members
// (an index range of space_members' primary key), how many it read, and up
// to $2 receiving devices of those members: active principals, their
// registrations, minus those who muted the space. It is the cheap
// pre-filter (the delivery job asks authz at send time), so it only has to
// be no narrower than authz. The actor is left out per event, in Go. Each
// device comes with its push service's origin (scheme and authority of the
// endpoint, cut at its slashes, cheaper than a regular expression), which
// groups devices into jobs; a space without devices has one row without a
// device. Taking the members first bounds the work by $2 however large the
// space: joined whole, the planner hashed every member of a large space to
// return a page of devices. OFFSET 0 keeps the member list from being read
// once per row.
const spaceDevicesSQL = `
SELECT s.ord, mm.n, d.origin, d.id, d.principal
FROM unnest($1::text[]) WITH ORDINALITY AS s(space, ord)
CROSS JOIN LATERAL (
    SELECT a.members, cardinality(a.members) AS n FROM (
        SELECT array(SELECT m.principal FROM space_members m
                     WHERE m.space = s.space AND m."right" >= 'read'
                     ORDER BY m.principal LIMIT $2) AS members
        OFFSET 0) a) mm
LEFT JOIN LATERAL (
    SELECT split_part(r.endpoint, '/', 1) || '//' || split_part(r.endpoint, '/', 3) AS origin, r.id, r.principal
    FROM unnest(mm.members) AS u(principal)
    JOIN principals p ON p.id = u.principal AND p.disabled_at IS NULL
    JOIN push_registrations r ON r.principal = u.principal
    WHERE NOT EXISTS (
        SELECT 1 FROM push_preferences pp
        WHERE pp.principal = u.principal AND pp.space = s.space AND NOT pp.notify)
    LIMIT $2) d ON true`

// Handle implements sync.Consumer: HandlePrefix without a budget.
func (c *Consumer) Handle(ctx context.Context, tx pgx.Tx, events []sync.Event) ([]sync.Job, error) {
	jobs, _, err := c.HandlePrefix(ctx, tx, events, sync.WorkBudget{Jobs: math.MaxInt, Receivers: math.MaxInt})
	return jobs, err
}

// HandlePrefix implements sync.ConsumerPrefixHandler. It reads the devices
// of the events' spaces a few spaces per statement, only as far as the
// budget reaches, and stops before the first event that would take the
// round past budget.Receivers, or once its jobs reach budget.Jobs.
func (c *Consumer) HandlePrefix(ctx context.Context, tx pgx.Tx, events []sync.Event, budget sync.WorkBudget) ([]sync.Job, int, error) {
	if c.cfg.Disabled || len(events) == 0 {
		return nil, len(events), nil
	}
	r := &roundPlan{cfg: &c.cfg, budget: budget, devices: map[string]*spaceDevices{},
		batches: newBatcher(c.cfg.BatchSize), pages: map[string]*PageArgs{}}
	order := firstAppearances(events)
	n := 0
	for i := range events {
		e := &events[i]
		if _, read := r.devices[e.Space]; !read {
			k, err := r.readSpaces(ctx, tx, order)
			if err != nil {
				return nil, 0, err
			}
			order = order[k:]
		}
		if i > 0 && !r.fits(e) {
			break
		}
		r.add(e)
		n++
	}
	return r.jobs(), n, nil
}

// firstAppearances lists the events' spaces in the order they first appear.
func firstAppearances(events []sync.Event) []string {
	seen := map[string]bool{}
	var out []string
	for i := range events {
		if !seen[events[i].Space] {
			seen[events[i].Space] = true
			out = append(out, events[i].Space)
		}
	}
	return out
}
