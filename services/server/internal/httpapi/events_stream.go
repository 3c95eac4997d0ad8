package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// The event stream: GET /v1/spaces/{space}/events with Accept:
// text/event-stream. Each event is a server-sent event whose id is its seq
// and whose data is its envelope; a reconnecting client sends the last id
// it got as Last-Event-ID and continues after it. The stream reads the log
// when NOTIFY event_log says it grew (and every EventsPollInterval), sends
// a comment every EventsHeartbeat, and ends when the client leaves, the
// server stops or the caller's rights no longer allow it.

// streamRetry is the reconnection delay the stream suggests to clients.
const streamRetry = 2 * time.Second

// acceptsEventStream reports whether the client asks for a stream.
func acceptsEventStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/event-stream" {
			return true
		}
	}
	return false
}

// streamStart applies Last-Event-ID, which a reconnecting client sends and
// which wins over after and cursor.
func streamStart(r *http.Request, q *eventsQuery) error {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		return nil
	}
	n, err := parseAfter("Last-Event-ID", "the seq of the last event received", strings.TrimSpace(v))
	if err != nil {
		return err
	}
	q.after = n
	return nil
}

// eventStream is one client's stream.
type eventStream struct {
	a    *API
	w    http.ResponseWriter
	rc   *http.ResponseController
	r    *http.Request
	s    *authz.Subject
	q    *eventsQuery
	sent int64 // the resume point the client has: the last id written
	// checked is when the rights were last read.
	checked time.Time
}

// streamEvents runs the stream until the client leaves, the server stops
// or the rights end. Once the 200 is sent nothing can become a problem
// document, so errors end the stream; the client reconnects from its last
// id.
func (a *API) streamEvents(w http.ResponseWriter, r *http.Request, s *authz.Subject, q *eventsQuery) error {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not hold the stream back
	w.WriteHeader(http.StatusOK)
	st := &eventStream{a: a, w: w, rc: http.NewResponseController(w), r: r, s: s, q: q, sent: q.after, checked: time.Now()}
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", streamRetry.Milliseconds()); err != nil || st.rc.Flush() != nil {
		return nil
	}
	var ae *apiError
	if err := st.run(); err != nil && r.Context().Err() == nil && !errors.As(err, &ae) {
		a.cfg.Logger.WarnContext(r.Context(), "http api: event stream ended", slog.String("space", q.space), slog.Any("error", err))
	}
	return nil
}

func (st *eventStream) run() error {
	a, ctx := st.a, st.r.Context()
	poll := time.NewTicker(a.cfg.EventsPollInterval)
	defer poll.Stop()
	beat := time.NewTicker(a.cfg.EventsHeartbeat)
	defer beat.Stop()
	after := st.q.after
	for {
		changed := a.changed()
		pg, err := a.reader.SpaceEvents(ctx, &sync.SpaceEventsParams{Space: st.q.space, AfterSeq: after, Types: st.q.types, Limit: st.q.limit})
		if err != nil {
			return err
		}
		after = pg.NextAfter
		if len(pg.Events) > 0 {
			if err := st.send(pg.Events); err != nil {
				return err
			}
		}
		if !pg.Done() {
			continue
		}
		select {
		case <-changed:
		case <-poll.C:
		case <-beat.C:
			if err := st.heartbeat(after); err != nil {
				return err
			}
		case <-a.stopping:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// send writes events once they are durable and the rights, read at most
// EventsRightsMaxAge ago, still allow them.
func (st *eventStream) send(events []sync.Event) error {
	if err := st.recheck(); err != nil {
		return err
	}
	if err := st.a.durable(st.r.Context()); err != nil {
		return err
	}
	var buf bytes.Buffer
	for i := range events {
		data, err := json.Marshal(events[i].Envelope())
		if err != nil {
			return fmt.Errorf("event %d: %w", events[i].Seq, err)
		}
		fmt.Fprintf(&buf, "id: %d\ndata: %s\n\n", events[i].Seq, data)
	}
	if _, err := st.w.Write(buf.Bytes()); err != nil {
		return err
	}
	st.sent = events[len(events)-1].Seq
	return st.rc.Flush()
}

// heartbeat writes a comment; when the stream has read past the last event
// it sent (other spaces' events, or ones its filter skips), it also moves
// the client's resume point there with an event that has an id and no
// data, which EventSource clients take as their last event id without
// dispatching anything.
func (st *eventStream) heartbeat(after int64) error {
	if err := st.recheck(); err != nil {
		return err
	}
	msg := ": keep-alive\n\n"
	if after > st.sent {
		if err := st.a.durable(st.r.Context()); err != nil {
			return err
		}
		msg = fmt.Sprintf(": keep-alive\nid: %d\n\n", after)
		st.sent = after
	}
	if _, err := st.w.Write([]byte(msg)); err != nil {
		return err
	}
	return st.rc.Flush()
}

// recheck reads the caller's rights again if the last check is older than
// EventsRightsMaxAge.
func (st *eventStream) recheck() error {
	if time.Since(st.checked) < st.a.cfg.EventsRightsMaxAge {
		return nil
	}
	if err := st.a.stillAllowed(st.r, st.s, st.q.space); err != nil {
		return err
	}
	st.checked = time.Now()
	return nil
}
