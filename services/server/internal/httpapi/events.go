package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// maxEventsPerRequest bounds one append.
const maxEventsPerRequest = 100

type appendEventsRequest struct {
	Events []newEventJSON `json:"events"`
}

type newEventJSON struct {
	// ID, if set, is the event's id (idempotency is the caller's).
	ID         *uuid.UUID      `json:"id"`
	Type       string          `json:"type"`
	OccurredAt *time.Time      `json:"occurred_at"`
	Data       json.RawMessage `json:"data"`
}

// appendEvents appends events to a space in one transaction through the
// event log's producer, with the subject as actor. It stands in for the
// sync write path until that exists; consumers see these events as any
// other.
func (a *API) appendEvents(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	space := r.PathValue("space")
	if err := a.allow(r, s, authz.ActionEventAppend, space); err != nil {
		return err
	}
	var req appendEventsRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if len(req.Events) == 0 || len(req.Events) > maxEventsPerRequest {
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "events: %d given, want 1..%d", len(req.Events), maxEventsPerRequest)
	}
	now := time.Now()
	news := make([]sync.NewEvent, len(req.Events))
	for i, e := range req.Events {
		ne := sync.NewEvent{Space: space, Type: e.Type, Actor: s.Principal, Data: e.Data}
		if e.ID != nil {
			ne.ID = *e.ID
		}
		if e.OccurredAt != nil {
			ne.OccurredAt = *e.OccurredAt
		}
		if err := ne.Normalize(now); err != nil {
			return errorf(http.StatusUnprocessableEntity, kindInvalid, "events[%d]: %v", i, err)
		}
		news[i] = ne
	}
	evs, err := a.log.Write(r.Context(), func(context.Context, pgx.Tx) ([]sync.NewEvent, error) { return news, nil })
	if err != nil {
		return err
	}
	out := make([]sync.Envelope, len(evs))
	for i := range evs {
		out[i] = evs[i].Envelope()
	}
	writeJSON(w, http.StatusCreated, map[string]any{"events": out})
	return nil
}
