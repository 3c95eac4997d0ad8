package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/httpapi"
	"github.com/bothy/bothy/services/server/internal/httpconn"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// pullBundle is the API alone on a fresh database with the parts of the
// pull path under the test's eye: a LISTEN connection that wakes the API's
// watcher (as app does), a reader that reports every read, and the API's
// Run, which the test can stop.
type pullBundle struct {
	*testBundle
	log *postgres.EventLog
	// quiet appends without a NOTIFY: its notifications are lost.
	quiet *postgres.EventLog
	// reads gets the number of events of every read of the log.
	reads chan int
	// stop ends the API's Run, as a server's shutdown does.
	stop func()
	// reg holds the API's and the waker's metrics.
	reg *prometheus.Registry
	// queries counts the statements the API sends on its pool
	// (authentication, rights), not those of its event reader.
	queries *atomic.Int64
}

// queryCounter is a pgx tracer counting the statements sent.
type queryCounter struct{ n *atomic.Int64 }

func (c queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// signalingReader reports each SpaceEvents read on reads, without
// blocking.
type signalingReader struct {
	sync.SpaceEventReader
	reads chan<- int
}

func (r signalingReader) SpaceEvents(ctx context.Context, p *sync.SpaceEventsParams) (*sync.SpaceEventsPage, error) {
	pg, err := r.SpaceEventReader.SpaceEvents(ctx, p)
	if err == nil {
		select {
		case r.reads <- len(pg.Events):
		default:
		}
	}
	return pg, err
}

// setupPull serves the API with cfg (its poll interval an hour unless
// set, so only a notice wakes a wait) and, with notify, a LISTEN
// connection waking it through a SpaceWaker that also reads every poll
// interval, as app does; it returns once the waker made its first read.
func setupPull(t *testing.T, cfg httpapi.Config, notify bool) *pullBundle {
	t.Helper()
	db := dbtest.NewDB(t)
	log := postgres.NewEventLog(db.Pool, nil)
	t.Cleanup(log.Close)
	quiet := postgres.NewEventLog(db.Pool, &postgres.EventLogConfig{Notify: postgres.NotifyNone})
	t.Cleanup(quiet.Close)
	b := &pullBundle{log: log, quiet: quiet, reads: make(chan int, 1000), reg: prometheus.NewRegistry(), queries: &atomic.Int64{}}
	pc, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pc.ConnConfig.Tracer = queryCounter{b.queries}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	deps := &module.Deps{Pool: pool, Events: log, Rounds: postgres.CursorStore{}, Reader: signalingReader{log, b.reads}, Registry: b.reg}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.EventsPollInterval == 0 {
		cfg.EventsPollInterval = time.Hour
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ended []chan struct{}
	goUntilEnd := func(f func()) {
		done := make(chan struct{})
		ended = append(ended, done)
		go func() { defer close(done); f() }()
	}
	if notify {
		bc := sync.NewSpaceBroadcast()
		deps.Appended = bc
		waker := sync.NewSpaceWaker(log, bc, &sync.SpaceWakerConfig{PollInterval: cfg.EventsPollInterval, Registerer: b.reg})
		goUntilEnd(func() { _ = waker.Run(ctx) })
		l := postgres.NewListener(waker.Wake, &postgres.ListenerConfig{ConnString: db.URL})
		goUntilEnd(func() { _ = l.Run(ctx) })
		// At least one: with a short poll interval the waker reads again
		// every interval, and a wait for exactly one can miss it.
		require.Eventually(t, func() bool { return b.metric(t, "bothy_event_wake_reads_total", "") >= 1 }, 20*time.Second,
			time.Millisecond, "the waker's first read")
	}

	api := httpapi.New(deps, &cfg)
	apiCtx, stopAPI := context.WithCancel(ctx)
	goUntilEnd(func() { _ = api.Run(apiCtx) })
	b.stop = stopAPI
	mux := http.NewServeMux()
	api.Routes(mux)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ConnContext = httpconn.Context
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		cancel()
		for _, d := range ended {
			<-d
		}
	})
	b.testBundle = &testBundle{db: db, base: srv.URL}
	return b
}

// metric is the sum of the series of metric name whose one label has
// value label (all, if "").
func (b *pullBundle) metric(t *testing.T, name, label string) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && (label == "" || m.GetLabel()[0].GetValue() == label) {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// waitMetric waits until metric (as b.metric reads it) is want.
func (b *pullBundle) waitMetric(t *testing.T, name, label string, want float64) {
	t.Helper()
	require.Eventually(t, func() bool { return b.metric(t, name, label) == want }, 20*time.Second, time.Millisecond,
		"%s{%s} is %v, want %v", name, label, b.metric(t, name, label), want)
}

// appendEvent commits one event to space through the log's producer, which
// sends NOTIFY event_log after the commit.
func (b *pullBundle) appendEvent(t *testing.T, space, typ string) sync.Event {
	t.Helper()
	evs, err := b.log.Write(context.Background(), func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{{Space: space, Type: typ, Actor: "writer"}}, nil
	})
	require.NoError(t, err)
	return evs[0]
}

// waitRead waits for the next read of the log that found n events.
func (b *pullBundle) waitRead(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case got := <-b.reads:
			if got == n {
				return
			}
		case <-deadline:
			t.Fatalf("no read of the log found %d events", n)
		}
	}
}

// longPoll sends a long poll in the background; its answer comes on the
// channel.
func (b *pullBundle) longPoll(t *testing.T, token, query string) <-chan *response {
	t.Helper()
	out := make(chan *response, 1)
	req, err := http.NewRequest("GET", b.base+"/v1/spaces/s1/events?"+query, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- &response{status: -1, body: []byte(err.Error())}
			return
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		out <- &response{status: res.StatusCode, header: res.Header, body: body}
	}()
	return out
}

func answer(t *testing.T, ch <-chan *response) *response {
	t.Helper()
	select {
	case r := <-ch:
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no answer")
		return nil
	}
}

// TestAPI_LongPollIsWokenByNotify: a long poll that found nothing answers
// the event committed while it waits. Its poll interval is an hour, so
// only the NOTIFY event_log the producer sends, heard by the LISTEN
// connection, can wake it before its wait ends; an event of another space
// does not wake it.
func TestAPI_LongPollIsWokenByNotify(t *testing.T) {
	t.Parallel()
	b := setupPull(t, httpapi.Config{}, true)
	reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)

	ch := b.longPoll(t, reader, "wait=20s")
	b.waitRead(t, 0) // it found nothing and waits
	reads := b.metric(t, "bothy_event_wake_reads_total", "")
	b.appendEvent(t, "s2", "item.created")
	b.waitMetric(t, "bothy_event_wake_reads_total", "", reads+1) // the waker read s2's event and woke its waiters
	require.Zero(t, b.metric(t, "bothy_event_waiters_woken_total", ""), "the long poll of s1 woken by s2's event")
	want := b.appendEvent(t, "s1", "item.created")
	r := answer(t, ch)
	evs := r.json(t)["events"].([]any)
	require.Len(t, evs, 1, "%s", r.body)
	require.Equal(t, want.ID.String(), evs[0].(map[string]any)["id"])
	b.waitMetric(t, "bothy_event_waiters_woken_total", "", 1)
}

func TestAPI_LongPollEnds(t *testing.T) {
	t.Parallel()

	t.Run("EmptyWhenTheWaitEnds", func(t *testing.T) {
		t.Parallel()
		b := setupPull(t, httpapi.Config{}, true)
		reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
		r := answer(t, b.longPoll(t, reader, "wait=50ms"))
		require.Empty(t, r.json(t)["events"])
		require.Equal(t, true, r.json(t)["done"])
	})
	t.Run("AtOnceWhenTheServerStops", func(t *testing.T) {
		t.Parallel()
		b := setupPull(t, httpapi.Config{}, true)
		reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
		ch := b.longPoll(t, reader, "wait=60s")
		b.waitRead(t, 0)
		b.stop()
		require.Empty(t, answer(t, ch).json(t)["events"], "answered before its wait of 60 s and the test's 30 s")
	})
	t.Run("ForbiddenWhenRevokedWhileWaiting", func(t *testing.T) {
		t.Parallel()
		b := setupPull(t, httpapi.Config{EventsRightsMaxAge: time.Nanosecond}, true)
		reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
		ch := b.longPoll(t, reader, "wait=20s")
		b.waitRead(t, 0)
		require.NoError(t, authz.Revoke(context.Background(), b.db.Pool, "s1", "reader"))
		b.appendEvent(t, "s1", "item.created")
		r := <-ch
		require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
	})
}

// sse is one block of a server-sent event stream.
type sse struct {
	id, data string
	hasID    bool
	comment  bool
}

// sseClient reads a stream; its reads fail when the test's deadline ends.
type sseClient struct {
	res *http.Response
	rd  *bufio.Reader
}

// openStream opens the event stream of s1 with token, sending header
// Last-Event-ID when lastID is set. The stream's client does not go through
// the OpenAPI validation, which reads answers whole.
func (b *pullBundle) openStream(t *testing.T, ctx context.Context, token, query, lastID string) *sseClient {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", b.base+"/v1/spaces/s1/events?"+query, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := (&http.Client{Transport: http.DefaultTransport}).Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { res.Body.Close() })
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	return &sseClient{res: res, rd: bufio.NewReader(res.Body)}
}

// next reads the next block; io.EOF when the stream ended cleanly.
func (c *sseClient) next() (sse, error) {
	var ev sse
	for {
		line, err := c.rd.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.hasID || ev.data != "" || ev.comment {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			ev.comment = true
		case strings.HasPrefix(line, "id: "):
			ev.id, ev.hasID = strings.TrimPrefix(line, "id: "), true
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// nextEvent skips comments and id-only blocks to the next event.
func (c *sseClient) nextEvent(t *testing.T) sse {
	t.Helper()
	for {
		ev, err := c.next()
		require.NoError(t, err)
		if ev.data != "" {
			return ev
		}
	}
}

func TestAPI_EventStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := setupPull(t, httpapi.Config{EventsHeartbeat: 20 * time.Millisecond, EventsRightsMaxAge: time.Nanosecond}, true)
	reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
	e1, e2 := b.appendEvent(t, "s1", "item.created"), b.appendEvent(t, "s1", "item.updated")

	st := b.openStream(t, ctx, reader, "after=0", "")
	for _, want := range []sync.Event{e1, e2} {
		ev := st.nextEvent(t)
		require.Equal(t, fmt.Sprint(want.Seq), ev.id, "the id is the seq")
		var env map[string]any
		require.NoError(t, json.Unmarshal([]byte(ev.data), &env))
		require.Equal(t, want.ID.String(), env["id"])
	}
	e3 := b.appendEvent(t, "s1", "item.deleted")
	require.Equal(t, fmt.Sprint(e3.Seq), st.nextEvent(t).id, "an event committed while it streams")

	t.Run("ResumesAfterLastEventID", func(t *testing.T) {
		again := b.openStream(t, ctx, reader, "after=0", fmt.Sprint(e2.Seq))
		require.Equal(t, fmt.Sprint(e3.Seq), again.nextEvent(t).id)
	})
	t.Run("HeartbeatsMoveTheResumePointPastOtherSpaces", func(t *testing.T) {
		other := b.appendEvent(t, "s2", "item.created")
		for {
			ev, err := st.next()
			require.NoError(t, err)
			require.Empty(t, ev.data, "no event of s2 is shown")
			if ev.hasID && ev.id == fmt.Sprint(other.Seq) {
				require.True(t, ev.comment)
				break
			}
		}
	})
	t.Run("EndsWhenTheRightIsRevoked", func(t *testing.T) {
		require.NoError(t, authz.Revoke(context.Background(), b.db.Pool, "s1", "reader"))
		b.appendEvent(t, "s1", "item.created")
		for {
			ev, err := st.next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			require.Empty(t, ev.data, "nothing after the revoke")
		}
	})
}

func TestAPI_EventStreamEnds(t *testing.T) {
	t.Parallel()

	t.Run("CleanlyWhenTheServerStops", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b := setupPull(t, httpapi.Config{EventsHeartbeat: time.Hour}, true)
		reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
		st := b.openStream(t, ctx, reader, "", "")
		b.waitRead(t, 0)
		b.stop()
		for {
			_, err := st.next()
			if err != nil {
				require.ErrorIs(t, err, io.EOF, "the stream's end, not a broken connection")
				break
			}
		}
	})
	t.Run("WhenTheClientLeaves", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		b := setupPull(t, httpapi.Config{EventsHeartbeat: time.Hour}, true)
		reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
		b.openStream(t, ctx, reader, "", "")
		b.waitRead(t, 0)
		cancel()
		// The test's cleanup closes the server, which waits for every
		// handler: a stream that went on would hold it (and goleak fails
		// the package for its goroutine).
	})
}
