package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/httpapi"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// TestAPI_EventWaitersAreLimited: a token may have two long polls and
// streams open, the process three; one more is 429 with Retry-After
// before it reads, a page without wait is not limited, and a slot is free
// again once its long poll answers or its stream ends.
func TestAPI_EventWaitersAreLimited(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := setupPull(t, httpapi.Config{MaxEventWaitersPerToken: 2, MaxEventWaiters: 3}, true)
	t.Cleanup(b.stop) // long polls left answer at once
	one := b.principal(t, "one", authz.RightRead, "s1", authz.ScopeEventsRead)
	other := b.principal(t, "other", authz.RightRead, "s1", authz.ScopeEventsRead)
	open := func(kind string) float64 { return b.metric(t, "bothy_http_event_waiters", kind) }
	refused := func(token, query, limit string) {
		t.Helper()
		r := b.do(t, http.MethodGet, "/v1/spaces/s1/events?"+query, token, "")
		require.Contains(t, r.problem(t, http.StatusTooManyRequests), "retry after Retry-After seconds")
		requireRetryAfter(t, r)
		require.Equal(t, "/v1/problems/too-many-requests", r.json(t)["type"])
		require.Contains(t, string(r.body), limit)
	}

	poll := b.longPoll(t, one, "wait=20s")
	streamCtx, endStream := context.WithCancel(ctx)
	b.openStream(t, streamCtx, one, "", "")
	b.waitMetric(t, "bothy_http_event_waiters", "", 2)
	require.Equal(t, 1.0, open("poll"))
	require.Equal(t, 1.0, open("stream"))

	refused(one, "wait=1s", "per token")
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/spaces/s1/events", one, "").status, "a page without wait")
	otherPoll := b.longPoll(t, other, "wait=20s")
	b.waitMetric(t, "bothy_http_event_waiters", "", 3)
	refused(other, "wait=1s", "the server has the most")
	require.Equal(t, 1.0, b.metric(t, "bothy_http_event_waiters_rejected_total", "token"))
	require.Equal(t, 1.0, b.metric(t, "bothy_http_event_waiters_rejected_total", "process"))

	t.Run("TheKeysSetTheServersLimits", func(t *testing.T) {
		db := dbtest.NewDB(t)
		srv := &testBundle{db: db, base: startServer(t, db.URL, "api", "server.max_event_waiters_per_token", "1",
			"server.max_event_waiters", "1")}
		token := srv.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
		pb := &pullBundle{testBundle: srv}
		pb.longPoll(t, token, "wait=20s")
		require.Eventually(t, func() bool { return scrape(t, srv.base, `bothy_http_event_waiters{kind="poll"}`) == 1 },
			20*time.Second, 10*time.Millisecond)
		r := srv.do(t, http.MethodGet, "/v1/spaces/s1/events?wait=1s", token, "")
		r.problem(t, http.StatusTooManyRequests)
		requireRetryAfter(t, r)
	})
	t.Run("ASlotIsFreeAgainWhenItsStreamEnds", func(t *testing.T) {
		endStream()
		b.waitMetric(t, "bothy_http_event_waiters", "stream", 0)
		r := answer(t, b.longPoll(t, one, "wait=50ms"))
		require.Empty(t, r.json(t)["events"])
	})
	t.Run("AndWhenItsLongPollAnswers", func(t *testing.T) {
		b.appendEvent(t, "s1", "item.created")
		answer(t, poll)
		answer(t, otherPoll)
		b.waitMetric(t, "bothy_http_event_waiters", "", 0)
		r := answer(t, b.longPoll(t, one, "wait=50ms&after=0"))
		require.Len(t, r.json(t)["events"], 1)
	})
}

// TestAPI_ATokenAtItsLimitIsRefusedWithoutAQuery: once a token has the
// most long polls and streams open, more of them are refused before they
// are authenticated, so a client retrying in a loop costs the database
// nothing; the same request with another secret is authenticated (401).
func TestAPI_ATokenAtItsLimitIsRefusedWithoutAQuery(t *testing.T) {
	t.Parallel()
	b := setupPull(t, httpapi.Config{MaxEventWaitersPerToken: 1}, true)
	t.Cleanup(b.stop) // the long poll answers at once
	reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
	b.longPoll(t, reader, "wait=20s")
	b.waitMetric(t, "bothy_http_event_waiters", "poll", 1)

	before := b.queries.Load()
	r := b.do(t, http.MethodGet, "/v1/spaces/s1/events?wait=1s", reader, "")
	r.problem(t, http.StatusTooManyRequests)
	requireRetryAfter(t, r)
	require.Equal(t, before, b.queries.Load(), "statements sent for a refused long poll")
	other := reader[:len(reader)-1] + "x"
	if other == reader {
		other = reader[:len(reader)-1] + "y"
	}
	r = b.do(t, http.MethodGet, "/v1/spaces/s1/events?wait=1s", other, "")
	r.problem(t, http.StatusUnauthorized)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/spaces/s1/events", reader, "").status, "a page is not refused")
}

// requireRetryAfter checks that r says to retry after 3 to 7 seconds.
func requireRetryAfter(t *testing.T, r *response) {
	t.Helper()
	secs, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", r.header.Get("Retry-After"))
	require.True(t, secs >= 3 && secs <= 7, "Retry-After %d", secs)
}

// TestAPI_NoEventIsMissedWhenNotificationsAreLost: events committed
// without a NOTIFY (one that failed, or a listener away) reach a waiting
// long poll and stream at the waker's next read, which comes every poll
// interval, long before the poll's wait of a minute ends.
func TestAPI_NoEventIsMissedWhenNotificationsAreLost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := setupPull(t, httpapi.Config{EventsPollInterval: 50 * time.Millisecond, EventsHeartbeat: time.Hour}, true)
	reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
	ch := b.longPoll(t, reader, "wait=60s") // beyond answer's 30 s
	st := b.openStream(t, ctx, reader, "", "")
	b.waitMetric(t, "bothy_http_event_waiters", "", 2)

	evs, err := b.quiet.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "writer"}}, nil
	})
	require.NoError(t, err)
	r := answer(t, ch)
	require.Len(t, r.json(t)["events"], 1, "%s", r.body)
	require.Equal(t, fmt.Sprint(evs[0].Seq), st.nextEvent(t).id)
}

// TestAPI_EventStreamClosesAReaderThatStopped: a client that stops reading
// a stream of 4 MiB is cut off once the stream's writes made no progress
// for server.event_stream_write_timeout, and what waited for it in the
// connection (its own receive buffer, the server's send buffer) was
// bounded. It runs the server as "bothy server" builds it, so the
// connection reaches the stream through every wrapper of the response.
func TestAPI_EventStreamClosesAReaderThatStopped(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	b := &testBundle{db: db, base: startServer(t, db.URL, "api", "server.event_stream_write_timeout", "200ms")}
	reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
	log := postgres.NewEventLog(db.Pool, nil)
	t.Cleanup(log.Close)
	pad := strings.Repeat("x", 64<<10-100)
	for range 4 {
		news := make([]sync.NewEvent, 16)
		for i := range news {
			news[i] = sync.NewEvent{Space: "s1", Type: "item.created", Actor: "writer", Data: []byte(`{"pad":"` + pad + `"}`)}
		}
		_, err := log.Write(context.Background(), func(context.Context, pgx.Tx) ([]sync.NewEvent, error) { return news, nil })
		require.NoError(t, err)
	}

	rd := stalledStream(t, b.base, reader)
	require.Eventually(t, func() bool {
		return scrape(t, b.base, "bothy_http_event_streams_stalled_total") == 1 && scrape(t, b.base, `bothy_http_event_waiters{kind="stream"}`) == 0
	}, 20*time.Second, 10*time.Millisecond, "the stream was not closed")
	queued, err := io.Copy(io.Discard, rd)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "the connection's end, after what was queued, in the middle of the stream")
	t.Logf("%d bytes were queued for the client", queued)
	require.Less(t, queued, int64(512<<10), "bytes queued for the client that stopped reading")
}

// scrape reads the value of series (a name, with its labels if any) from
// the server's /metrics; -1 if it has none.
func scrape(t *testing.T, base, series string) float64 {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return -1
}

// stalledStream opens s1's stream on a connection with a small receive
// buffer, reads its answer's header and returns the reader of the rest,
// which the test leaves unread for now.
func stalledStream(t *testing.T, base, token string) *bufio.Reader {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = fmt.Fprintf(conn, "GET /v1/spaces/s1/events?after=0 HTTP/1.1\r\nHost: bothy\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", token)
	require.NoError(t, err)
	rd := bufio.NewReaderSize(conn, 1024)
	res, err := http.ReadResponse(rd, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	return bufio.NewReader(res.Body)
}

func TestAPI_EventPullMetricsLint(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	httpapi.New(&module.Deps{Registry: reg}, nil)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}
