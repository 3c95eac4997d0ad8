package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/httpconn"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// The event stream: GET /v1/spaces/{space}/events with Accept:
// text/event-stream. Each event is a server-sent event whose id is its seq
// and whose data is its envelope; a reconnecting client sends the last id
// it got as Last-Event-ID and continues after it. The stream reads the log
// when a notice says its space got events (without a watcher, every
// EventsPollInterval), sends a comment every EventsHeartbeat, and ends
// when the client leaves, the server stops, the caller's rights no longer
// allow it or a write makes no progress for EventsStreamWriteTimeout. What
// a client has not read waits in the connection's send buffer, which the
// stream bounds (EventsStreamSendBuffer), and in the response's buffer,
// written one event at a time.

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

// streamEvents runs the stream until the client leaves, the server stops,
// the rights end or the client stops reading. Once the 200 is sent nothing
// can become a problem document, so errors end the stream; the client
// reconnects from its last id.
func (a *API) streamEvents(w http.ResponseWriter, r *http.Request, s *authz.Subject, q *eventsQuery) error {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not hold the stream back
	httpconn.SetWriteBuffer(r.Context(), a.cfg.EventsStreamSendBuffer)
	w.WriteHeader(http.StatusOK)
	st := &eventStream{a: a, w: w, rc: http.NewResponseController(w), r: r, s: s, q: q, sent: q.after, checked: time.Now()}
	if st.write(fmt.Appendf(nil, "retry: %d\n\n", streamRetry.Milliseconds())) != nil || st.flush() != nil {
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
	ticks, stopTicks := a.pollTicks()
	defer stopTicks()
	beat := time.NewTicker(a.cfg.EventsHeartbeat)
	defer beat.Stop()
	changed, unwatch := a.watch(st.q.space)
	defer unwatch()
	after := st.q.after
	for {
		notice := changed()
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
		case <-notice:
		case <-ticks:
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
// EventsRightsMaxAge ago, still allow them, one at a time.
func (st *eventStream) send(events []sync.Event) error {
	if err := st.recheck(); err != nil {
		return err
	}
	if err := st.a.durable(st.r.Context()); err != nil {
		return err
	}
	for i := range events {
		data, err := json.Marshal(events[i].Envelope())
		if err != nil {
			return fmt.Errorf("event %d: %w", events[i].Seq, err)
		}
		if err := st.write(fmt.Appendf(nil, "id: %d\ndata: %s\n\n", events[i].Seq, data)); err != nil {
			return err
		}
	}
	st.sent = events[len(events)-1].Seq
	return st.flush()
}

// write writes p, failing once the client has taken none of it for
// EventsStreamWriteTimeout.
func (st *eventStream) write(p []byte) error {
	if err := st.rc.SetWriteDeadline(time.Now().Add(st.a.cfg.EventsStreamWriteTimeout)); err != nil {
		return fmt.Errorf("event stream: set write deadline: %w", err)
	}
	_, err := st.w.Write(p)
	return st.stalled(err)
}

// flush sends what the response buffers, with write's bound.
func (st *eventStream) flush() error {
	if err := st.rc.SetWriteDeadline(time.Now().Add(st.a.cfg.EventsStreamWriteTimeout)); err != nil {
		return fmt.Errorf("event stream: set write deadline: %w", err)
	}
	return st.stalled(st.rc.Flush())
}

// stalled counts err if a write ran out of its deadline.
func (st *eventStream) stalled(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		st.a.waiters.stalled.Inc()
	}
	return err
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
	if err := st.write([]byte(msg)); err != nil {
		return err
	}
	return st.flush()
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
