package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/eventexpr"
)

// MaxPreviewEvents is the most recent events a preview evaluates.
const MaxPreviewEvents = 100

// previewWindow is how many seqs back from the head RecentEvents looks for
// a space's events, so a quiet space in a busy log costs a bounded read.
const previewWindow = 10_000

// PreviewRequest is the body of POST /v1/webhooks/{id}/preview. Absent
// expressions are the subscription's saved ones; "" is none.
type PreviewRequest struct {
	Filter    *string `json:"filter,omitempty"`
	Transform *string `json:"transform,omitempty"`
	// Event, if set, is evaluated instead of the space's recent events.
	Event *PreviewEvent `json:"event,omitempty"`
	// Limit is how many of the space's most recent events are evaluated:
	// default 20, at most MaxPreviewEvents.
	Limit int `json:"limit,omitempty"`
}

// PreviewEvent is an event given to a preview, in the envelope's shape;
// absent fields are made up: a new id, seq 0, the subscription's space, now.
type PreviewEvent sync.Envelope

// Event returns e as an event of space, its absent fields made up.
func (e *PreviewEvent) Event(space string) sync.Event {
	ev := sync.Event{ID: e.ID, Seq: e.Seq, Type: e.Type, Space: e.Space, Actor: e.Actor, OccurredAt: e.OccurredAt, Data: e.Data}
	if ev.ID == uuid.Nil {
		ev.ID = uuid.New()
	}
	if ev.Space == "" {
		ev.Space = space
	}
	if ev.OccurredAt.IsZero() {
		ev.OccurredAt = time.Now().UTC().Truncate(time.Microsecond) // as the log keeps it
	}
	if len(ev.Data) == 0 {
		ev.Data = json.RawMessage(`{}`)
	}
	return ev
}

// PreviewView is the answer of a preview: per event, whether the
// subscription would be sent it and what body.
type PreviewView struct {
	Filter    string              `json:"filter"`
	Transform string              `json:"transform"`
	Results   []PreviewResultView `json:"results"`
}

// PreviewResultView is one event of a PreviewView. Body is absent for an
// event not matched; Error says why an expression failed on the event.
type PreviewResultView struct {
	Seq     int64           `json:"seq"`
	EventID uuid.UUID       `json:"event_id"`
	Type    string          `json:"type"`
	Matched bool            `json:"matched"`
	Body    json.RawMessage `json:"body,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// Preview evaluates the subscription's event-type filter and the given
// filter and transform (the saved ones where req leaves them out) on
// events. An expression that does not compile is ErrInvalid naming its
// field; one that fails on an event is that event's error.
func Preview(s *Subscription, req *PreviewRequest, events []sync.Event) (*PreviewView, error) {
	v := &PreviewView{Filter: s.Filter, Transform: s.Transform, Results: []PreviewResultView{}}
	if req.Filter != nil {
		v.Filter = *req.Filter
	}
	if req.Transform != nil {
		v.Transform = *req.Transform
	}
	filter, err := previewProgram("filter", eventexpr.Filter, v.Filter)
	if err != nil {
		return nil, err
	}
	transform, err := previewProgram("transform", eventexpr.Transform, v.Transform)
	if err != nil {
		return nil, err
	}
	for i := range events {
		v.Results = append(v.Results, previewOne(s.EventTypes, filter, transform, &events[i]))
	}
	return v, nil
}

func previewProgram(field string, kind eventexpr.Kind, src string) (*eventexpr.Program, error) {
	if src == "" {
		return nil, nil
	}
	prg, err := eventexpr.Compile(kind, src)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, field, err)
	}
	return prg, nil
}

// previewOne is what the round and a sender would make of ev.
func previewOne(types []string, filter, transform *eventexpr.Program, ev *sync.Event) PreviewResultView {
	r := PreviewResultView{Seq: ev.Seq, EventID: ev.ID, Type: ev.Type}
	if !typesMatch(types, ev.Type) {
		return r
	}
	in := eventexpr.NewInput(ev)
	if filter != nil {
		ok, err := filter.Match(in)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		if !ok {
			return r
		}
	}
	r.Matched = true
	var err error
	if transform != nil {
		r.Body, err = transform.Body(in)
	} else {
		r.Body, err = json.Marshal(ev.Envelope())
	}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// typesMatch says whether an event of type typ matches one of a
// subscription's event-type filters (none: every type).
func typesMatch(types []string, typ string) bool {
	if len(types) == 0 {
		return true
	}
	for _, c := range candidates(typ) {
		if slices.Contains(types, c) {
			return true
		}
	}
	return false
}

// RecentEvents returns up to n of the newest events of space among the
// last previewWindow seqs of the log, oldest first.
func RecentEvents(ctx context.Context, reader sync.SpaceEventReader, space string, n int) ([]sync.Event, error) {
	head, err := reader.SpaceEvents(ctx, &sync.SpaceEventsParams{Space: space, Limit: 1, ScanLimit: 1})
	if err != nil {
		return nil, err
	}
	var out []sync.Event
	after := max(head.Head-previewWindow, 0)
	for after < head.Head {
		pg, err := reader.SpaceEvents(ctx, &sync.SpaceEventsParams{Space: space, AfterSeq: after, Limit: 500,
			ScanLimit: head.Head - after})
		if err != nil {
			return nil, err
		}
		out = append(out, pg.Events...)
		if len(out) > n {
			out = slices.Clone(out[len(out)-n:])
		}
		if pg.NextAfter <= after {
			break
		}
		after = pg.NextAfter
	}
	return out, nil
}
