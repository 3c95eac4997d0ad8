package httpapi

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/eventtypes"
	"github.com/bothy/bothy/services/server/internal/page"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// Reading a space's events: a page after a seq, a long poll that answers
// as soon as one exists, a stream (events.go appends). Everything shown
// passes the durability barrier first, the cursor included: it names a
// seq, and a seq a crash could take back would be handed to another event.

const (
	cursorEvents     = "events"
	cursorEventTypes = "event-types"
	// maxWait bounds a long poll.
	maxWait = 60 * time.Second
	// maxTypePatterns bounds the patterns of one request's type filter.
	maxTypePatterns = 20
	// maxAfter is the largest position a client may name: the seq after
	// it is still an int8.
	maxAfter = math.MaxInt64 - 1
)

// parseAfter reads a position in the log sent as parameter name (after,
// Last-Event-ID), what describing what it is: a seq, 0..maxAfter, else
// 400 naming the parameter.
func parseAfter(name, what, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > maxAfter {
		return 0, errorf(http.StatusBadRequest, kindBadRequest, "%s %q: want %s, 0..%d", name, v, what, int64(maxAfter))
	}
	return n, nil
}

// parseWait reads a long poll's wait: a Go duration or whole seconds,
// 0..maxWait, checked before the seconds are multiplied out.
func parseWait(v string) (time.Duration, error) {
	bad := errorf(http.StatusBadRequest, kindBadRequest, "wait %q: want a duration such as 30s (or seconds), at most %s", v, maxWait)
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > int64(maxWait/time.Second) {
			return 0, bad
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > maxWait {
		return 0, bad
	}
	return d, nil
}

// eventsQuery is what a request for a space's events asks.
type eventsQuery struct {
	space string
	after int64
	limit int
	types []string
	wait  time.Duration
}

// parseEventsQuery reads after or cursor, limit, type and wait: 400 naming
// the parameter.
func parseEventsQuery(r *http.Request, space string) (*eventsQuery, error) {
	q := r.URL.Query()
	if q.Get("after") != "" && q.Get("cursor") != "" {
		return nil, errorf(http.StatusBadRequest, kindBadRequest, "after and cursor: send one of them")
	}
	limit, cur, err := pageParams(r, cursorEvents)
	if err != nil {
		return nil, err
	}
	if cur.Seq < 0 || cur.Seq > maxAfter {
		return nil, errorf(http.StatusBadRequest, kindBadRequest, "cursor: %v", page.ErrBadCursor)
	}
	eq := &eventsQuery{space: space, limit: limit, after: cur.Seq}
	if v := q.Get("after"); v != "" {
		if eq.after, err = parseAfter("after", "a seq", v); err != nil {
			return nil, err
		}
	}
	if v := q.Get("type"); v != "" {
		eq.types = strings.Split(v, ",")
		if len(eq.types) > maxTypePatterns {
			return nil, errorf(http.StatusBadRequest, kindBadRequest, "type: %d patterns, at most %d", len(eq.types), maxTypePatterns)
		}
		for _, p := range eq.types {
			if !sync.ValidTypePattern(p) {
				return nil, errorf(http.StatusBadRequest, kindBadRequest, "type %q: want comma-separated patterns such as item.created, item.* or *", p)
			}
		}
	}
	if v := q.Get("wait"); v != "" {
		if eq.wait, err = parseWait(v); err != nil {
			return nil, err
		}
	}
	return eq, nil
}

// eventsPage is the answer of GET /v1/spaces/{space}/events.
type eventsPage struct {
	Events []sync.Envelope `json:"events"`
	// NextCursor is where the next request continues; always set, since
	// the log goes on.
	NextCursor string `json:"next_cursor"`
	// Done: nothing after next_cursor was committed when the page was read.
	Done bool `json:"done"`
	// Lost is the range of seqs retention removed before they were read;
	// the space's events among them are gone.
	Lost *lostRange `json:"lost,omitempty"`
}

type lostRange struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

func newEventsPage(pg *sync.SpaceEventsPage) eventsPage {
	out := eventsPage{Events: make([]sync.Envelope, len(pg.Events)), Done: pg.Done(),
		NextCursor: page.Key{List: cursorEvents, Seq: pg.NextAfter}.Encode()}
	for i := range pg.Events {
		out.Events[i] = pg.Events[i].Envelope()
	}
	if pg.Lost.Len() > 0 {
		out.Lost = &lostRange{From: pg.Lost.From, To: pg.Lost.To}
	}
	return out
}

// listEvents answers a page of the space's events in seq order, waits for
// one with wait, or streams them to a client that accepts
// text/event-stream (events_stream.go). Read on the space and scope
// events:read. A long poll or a stream beyond the limits of waiters.go is
// answered 429.
func (a *API) listEvents(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	space, err := pathSpace(r)
	if err != nil {
		return err
	}
	q, err := parseEventsQuery(r, space)
	if err != nil {
		return err
	}
	stream := acceptsEventStream(r)
	if stream {
		if q.wait > 0 {
			return errorf(http.StatusBadRequest, kindBadRequest, "wait: a stream waits by itself; send wait only without Accept: text/event-stream")
		}
		if err := streamStart(r, q); err != nil {
			return err
		}
	}
	// The limits come before the rights, so that refusing costs no query.
	if kind := waiterKind(stream, q); kind != "" {
		leave, err := a.waiters.enter(s, bearerOf(r), kind)
		if err != nil {
			return err
		}
		defer leave()
	}
	if err := a.allow(r, s, authz.ActionEventsRead, space); err != nil {
		return err
	}
	if stream {
		return a.streamEvents(w, r, s, q)
	}
	pg, err := a.pollEvents(r, s, q)
	if err != nil {
		return err
	}
	bw := newBufferedWriter()
	writeJSON(bw, http.StatusOK, newEventsPage(pg))
	a.answerDurably(w, r, bw)
	return nil
}

// shedWaiter refuses, before authentication, a long poll or stream sent
// with the bearer secret of a token that has the most open already.
func (a *API) shedWaiter(r *http.Request) error {
	q, err := parseEventsQuery(r, r.PathValue("space"))
	if err != nil || waiterKind(acceptsEventStream(r), q) == "" {
		return nil // the handler answers it
	}
	return a.waiters.shed(bearerOf(r))
}

// bearerOf is the bearer secret r sends, as authenticate reads it; "" if
// none.
func bearerOf(r *http.Request) string {
	scheme, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(cred)
}

// waiterKind is what the request counts as against the limits of
// waiters.go: a stream, a long poll, or nothing ("") for a page.
func waiterKind(stream bool, q *eventsQuery) string {
	switch {
	case stream:
		return waiterStream
	case q.wait > 0:
		return waiterPoll
	}
	return ""
}

// pollEvents reads the page after q.after; with q.wait, it reads again on
// every notice for the space (without a watcher, every EventsPollInterval)
// until an event comes, the wait ends or the server stops. A scan window
// with nothing of the space in it is passed over at once. Events found after the rights were read
// more than EventsRightsMaxAge ago are answered only if the rights, read
// again, still allow them.
func (a *API) pollEvents(r *http.Request, s *authz.Subject, q *eventsQuery) (*sync.SpaceEventsPage, error) {
	ctx := r.Context()
	deadline := time.Now().Add(q.wait)
	after, lost, checked := q.after, sync.SeqRange{}, time.Now()
	changed, unwatch := noWatch, func() {}
	if q.wait > 0 {
		changed, unwatch = a.watch(q.space)
	}
	defer unwatch()
	ticks, stopTicks := a.pollTicks()
	defer stopTicks()
	for {
		notice := changed()
		pg, err := a.reader.SpaceEvents(ctx, &sync.SpaceEventsParams{Space: q.space, AfterSeq: after, Types: q.types, Limit: q.limit})
		if err != nil {
			return nil, err
		}
		if lost.Len() == 0 {
			lost = pg.Lost
		}
		pg.Lost = lost
		if len(pg.Events) > 0 || q.wait == 0 || !time.Now().Before(deadline) {
			if len(pg.Events) > 0 && time.Since(checked) >= a.cfg.EventsRightsMaxAge {
				return pg, a.stillAllowed(r, s, q.space) // it waited: read the rights again
			}
			return pg, nil
		}
		after = pg.NextAfter
		if !pg.Done() {
			continue
		}
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-notice:
		case <-ticks:
		case <-timer.C:
		case <-a.stopping:
			deadline = time.Now()
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		}
		timer.Stop()
	}
}

// watch watches space for notices (sync.AppendWatcher.Watch); without a
// watcher, changed returns nil (never closed), and waits rely on the poll
// interval.
func (a *API) watch(space string) (changed func() <-chan struct{}, unwatch func()) {
	if a.appended == nil {
		return noWatch, func() {}
	}
	return a.appended.Watch(space)
}

// noWatch is changed for a wait that watches nothing.
func noWatch() <-chan struct{} { return nil }

// pollTicks ticks every EventsPollInterval when the API has no watcher,
// so waits read by themselves; never with one, whose notices come also
// for events whose NOTIFY was lost.
func (a *API) pollTicks() (ticks <-chan time.Time, stop func()) {
	if a.appended != nil {
		return nil, func() {}
	}
	t := time.NewTicker(a.cfg.EventsPollInterval)
	return t.C, t.Stop
}

// stillAllowed decides events.read on space again, with the token's
// scopes and the principal's rights as they are now: a long poll or a
// stream that began before a revoke must not show what came after it.
func (a *API) stillAllowed(r *http.Request, s *authz.Subject, space string) error {
	req := &authz.Request{Action: authz.ActionEventsRead, Principal: s.Principal, Scopes: scopesOf(s), Space: space}
	if s.TokenID != uuid.Nil {
		req.Scopes, req.Token = nil, &s.TokenID
	}
	d, err := authz.Allowed(r.Context(), a.pool, req)
	if err != nil {
		return err
	}
	if !d.Allowed {
		return errorf(http.StatusForbidden, kindForbidden, "%s: %s", authz.ActionEventsRead, d.Reason)
	}
	return nil
}

// getEvent answers one event of the space by its id.
func (a *API) getEvent(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	space, err := pathSpace(r)
	if err != nil {
		return err
	}
	if err := a.allow(r, s, authz.ActionEventsRead, space); err != nil {
		return err
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return errorf(http.StatusNotFound, kindNotFound, "%q is not an event id", r.PathValue("id"))
	}
	e, err := a.reader.EventByID(r.Context(), id)
	if errors.Is(err, sync.ErrEventNotFound) || (err == nil && e.Space != space) {
		return errorf(http.StatusNotFound, kindNotFound, "no event %s in space %q (never appended, or removed by retention)", id, space)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e.Envelope())
	return nil
}

// listEventTypes answers a page of the types the space's events had, from
// the catalog its consumer keeps (package eventtypes), in type order.
func (a *API) listEventTypes(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	space, err := pathSpace(r)
	if err != nil {
		return err
	}
	if err := a.allow(r, s, authz.ActionEventsRead, space); err != nil {
		return err
	}
	limit, after, err := pageParams(r, cursorEventTypes)
	if err != nil {
		return err
	}
	ts, err := eventtypes.List(r.Context(), a.pool, &eventtypes.ListParams{Space: space, AfterType: after.Name, Limit: limit + 1})
	if err != nil {
		return err
	}
	out := struct {
		EventTypes []eventtypes.View `json:"event_types"`
		NextCursor string            `json:"next_cursor,omitempty"`
	}{EventTypes: []eventtypes.View{}}
	ts, out.NextCursor = pageOf(ts, limit, func(t *eventtypes.Type) page.Key { return page.Key{List: cursorEventTypes, Name: t.Type} })
	for i := range ts {
		out.EventTypes = append(out.EventTypes, ts[i].View())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
