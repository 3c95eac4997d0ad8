package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// maxEventsPerRequest bounds one append.
const maxEventsPerRequest = 100

// reservedTypePrefix begins the types of the events bothy appends itself
// (webhooks.OperationalPrefix and any later ones); clients may not append
// them.
const reservedTypePrefix = "bothy."

// appendEvents appends events to a space in one transaction through the
// event log's producer, with the subject as actor. It stands in for the
// sync write path until that exists; consumers see these events as any
// other.
//
// Appending is idempotent by event id, as a retry after a lost answer
// needs: an event whose id is already in the log (within retention), or
// earlier in the request, is not appended again. The answer is 201 with
// every event as logged, the original seq included, whether or not some or
// all were there before, so a retry gets the answer its first attempt
// would have (as a replayed Stripe idempotency key does); a repeated event
// carries "duplicate": true. An id already used for an event with another
// space, type, actor or data is 409, and nothing is appended. occurred_at
// is not compared: it defaults to the time of each attempt.
//
// Everything PostgreSQL would refuse is refused here first, as 4xx naming
// the field (sync.NewEvent.Normalize), and a database outage is 503 (fail).
func (a *API) appendEvents(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	space, err := pathSpace(r)
	if err != nil {
		return err
	}
	if err := a.allow(r, s, authz.ActionEventAppend, space); err != nil {
		return err
	}
	var req sync.AppendRequest
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
			return eventError(i, err)
		}
		if strings.HasPrefix(ne.Type, reservedTypePrefix) {
			return errorf(http.StatusUnprocessableEntity, kindInvalid, "events[%d].type: %q: types beginning %s are the server's own "+
				"(operational events such as bothy.webhook.disabled), so receivers can trust them", i, ne.Type, reservedTypePrefix)
		}
		news[i] = ne
	}
	evs, err := a.log.Append(r.Context(), news)
	if err != nil {
		var ee *sync.EventError
		if errors.As(err, &ee) {
			return eventError(ee.Index, ee.Err)
		}
		return err
	}
	out := sync.AppendResponse{Events: make([]sync.AppendedEvent, len(evs))}
	for i := range evs {
		out.Events[i] = sync.AppendedEvent{Envelope: evs[i].Envelope(), Duplicate: evs[i].Duplicate}
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// eventError is the problem for an error about events[i] of a request: the
// field Normalize refused (422) or a reused id (409).
func eventError(i int, err error) error {
	var fe *sync.FieldError
	switch {
	case errors.As(err, &fe):
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "events[%d].%s: %s", i, fe.Field, fe.Reason)
	case errors.Is(err, sync.ErrEventIDConflict):
		return errorf(http.StatusConflict, kindIDReused, "events[%d].id: %v; send a new id for a different event", i, err)
	}
	return errorf(http.StatusUnprocessableEntity, kindInvalid, "events[%d]: %v", i, err)
}

// pathSpace returns the space named in the path. A name that cannot be a
// space (PostgreSQL could not even store some of them, such as %00) is
// refused before anything reads the database, as forbidden: no right can
// exist on it.
func pathSpace(r *http.Request) (string, error) {
	space := r.PathValue("space")
	if err := sync.CheckSpace(space); err != nil {
		var fe *sync.FieldError
		if errors.As(err, &fe) {
			return "", errorf(http.StatusForbidden, kindForbidden, "space in the path: %s", fe.Reason)
		}
		return "", err
	}
	return space, nil
}
