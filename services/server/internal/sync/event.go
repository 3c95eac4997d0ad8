package sync

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"
)

// Event is one committed entry of the log.
type Event struct {
	// Seq is the event's position in commit order, starting at 1, without gaps.
	Seq int64
	// CommittedAt is taken under the counter lock right before commit, so it
	// grows with Seq (unless the clock steps back).
	CommittedAt time.Time
	ID          uuid.UUID
	Space       string
	Type        string
	Actor       string
	OccurredAt  time.Time
	Data        json.RawMessage
}

// Envelope is the stable JSON shape of an event as it leaves the system (the
// body of a webhook, the reference in a push payload). Fields are only ever
// added, never renamed.
type Envelope struct {
	ID         uuid.UUID       `json:"id"`
	Seq        int64           `json:"seq"`
	Type       string          `json:"type"`
	Space      string          `json:"space"`
	Actor      string          `json:"actor"`
	OccurredAt time.Time       `json:"occurred_at"`
	Data       json.RawMessage `json:"data"`
}

// Envelope returns the event's outside form.
func (e *Event) Envelope() Envelope {
	data := e.Data
	if len(data) == 0 {
		data = json.RawMessage(`{}`)
	}
	return Envelope{ID: e.ID, Seq: e.Seq, Type: e.Type, Space: e.Space, Actor: e.Actor, OccurredAt: e.OccurredAt.UTC(), Data: data}
}

// NewEvent is an event a producer wants to append.
type NewEvent struct {
	// ID identifies the event for receivers (webhook-id). Default: a new UUIDv7.
	ID uuid.UUID
	// Space the event belongs to; permissions are checked against it. Required.
	Space string
	// Type such as "item.created": lower-case dotted words. Required.
	Type string
	// Actor is the principal that caused the event. Required.
	Actor string
	// OccurredAt is when it happened in the domain. Default: now.
	OccurredAt time.Time
	// Data must be a JSON object. Default: {}.
	Data json.RawMessage
}

var (
	typePattern = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)
	namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)
)

// MaxEventData bounds an event's data; larger payloads belong in the domain
// tables, with the event pointing at them.
const MaxEventData = 64 << 10

// Normalize fills defaults and validates the event, saying which field is
// wrong. It never panics, whatever the input.
func (e *NewEvent) Normalize(now time.Time) error {
	if !namePattern.MatchString(e.Space) {
		return fmt.Errorf("event space %q: want 1-128 characters of letters, digits and ._:@-", e.Space)
	}
	if !typePattern.MatchString(e.Type) || len(e.Type) > 128 {
		return fmt.Errorf("event type %q: want dotted lower-case words such as item.created", e.Type)
	}
	if !namePattern.MatchString(e.Actor) {
		return fmt.Errorf("event actor %q: want 1-128 characters of letters, digits and ._:@-", e.Actor)
	}
	if len(e.Data) == 0 {
		e.Data = json.RawMessage(`{}`)
	}
	if len(e.Data) > MaxEventData {
		return fmt.Errorf("event data: %d bytes, at most %d", len(e.Data), MaxEventData)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(e.Data, &obj); err != nil || obj == nil {
		return fmt.Errorf("event data: must be a JSON object")
	}
	if e.ID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("event id: %w", err)
		}
		e.ID = id
	}
	if e.OccurredAt.IsZero() {
		e.OccurredAt = now
	}
	return nil
}

// SeqRange is an inclusive range of sequence numbers.
type SeqRange struct {
	From, To int64
}

// Len is the number of seqs in the range; the zero SeqRange (seqs start
// at 1) is empty.
func (r SeqRange) Len() int64 {
	if r.From < 1 || r.To < r.From {
		return 0
	}
	return r.To - r.From + 1
}

func (r SeqRange) String() string { return fmt.Sprintf("%d..%d", r.From, r.To) }
