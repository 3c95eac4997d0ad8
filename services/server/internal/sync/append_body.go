package sync

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// AppendRequest is the body of POST /v1/spaces/{space}/events, as the HTTP
// API reads it and the CLI and bothy dev send it.
type AppendRequest struct {
	Events []NewEventRequest `json:"events"`
}

// NewEventRequest is one event of an AppendRequest; the space is the
// path's and the actor the caller.
type NewEventRequest struct {
	// ID, if set, is the event's id; sending it again repeats the event
	// instead of appending another.
	ID         *uuid.UUID      `json:"id,omitempty"`
	Type       string          `json:"type"`
	OccurredAt *time.Time      `json:"occurred_at,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
}

// AppendResponse is the answer to an AppendRequest: every event as logged,
// in the order sent.
type AppendResponse struct {
	Events []AppendedEvent `json:"events"`
}

// AppendedEvent is an event of an AppendResponse, marked when it was in
// the log before the request or earlier in it.
type AppendedEvent struct {
	Envelope
	Duplicate bool `json:"duplicate,omitempty"`
}
