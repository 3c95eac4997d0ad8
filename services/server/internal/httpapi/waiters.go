package httpapi

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	gosync "sync"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// Long polls and event streams hold a connection and a goroutine while
// they wait, and each reads the log whenever its space gets an event, so a
// process bounds how many it keeps open: per token
// (MaxEventWaitersPerToken), so that one client cannot take them all, and
// in all (MaxEventWaiters). One beyond either limit is answered 429 with
// Retry-After before it reads anything.

// Kinds of waiters, the values of bothy_http_event_waiters' kind label.
const (
	waiterPoll   = "poll"
	waiterStream = "stream"
)

// Limits a waiter was refused by, the values of
// bothy_http_event_waiters_rejected_total's limit label.
const (
	limitToken   = "token"
	limitProcess = "process"
)

// retryAfterBusy is the Retry-After, in seconds, of a 429 for too many
// waiters: 3 to 7, at random, so that clients refused together (a flood
// that opened its long polls at once) do not come back together; a long
// poll ends within a minute, so slots free up within seconds on a busy
// server, and a client retrying sooner only adds load.
func retryAfterBusy() string { return strconv.Itoa(3 + rand.IntN(5)) }

// waiters counts the open long polls and streams, per token and in all.
// It is safe for concurrent use.
type waiters struct {
	perToken, total int

	mu      gosync.Mutex
	byToken map[string]int
	n       int

	open     *prometheus.GaugeVec
	rejected *prometheus.CounterVec
	stalled  prometheus.Counter
}

func newWaiters(perToken, total int, reg prometheus.Registerer) *waiters {
	w := &waiters{perToken: perToken, total: total, byToken: map[string]int{},
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bothy_http_event_waiters",
			Help: "Long polls (kind poll) and event streams (kind stream) open in this process.",
		}, []string{"kind"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bothy_http_event_waiters_rejected_total",
			Help: "Long polls and event streams answered 429 by the limit they would have passed: token (server.max_event_waiters_per_token) or process (server.max_event_waiters).",
		}, []string{"limit"}),
		stalled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bothy_http_event_streams_stalled_total",
			Help: "Event streams closed because a write did not progress within server.event_stream_write_timeout (a client that stopped reading).",
		}),
	}
	for _, k := range []string{waiterPoll, waiterStream} {
		w.open.WithLabelValues(k)
	}
	for _, l := range []string{limitToken, limitProcess} {
		w.rejected.WithLabelValues(l)
	}
	reg.MustRegister(w.open, w.rejected, w.stalled)
	return w
}

// enter counts a waiter of s of kind, or refuses it with a 429 when its
// token or the process has the most open already; leave uncounts it.
func (w *waiters) enter(s *authz.Subject, kind string) (leave func(), err error) {
	key := "principal:" + s.Principal
	if s.TokenID != uuid.Nil {
		key = "token:" + s.TokenID.String()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.byToken[key] >= w.perToken:
		w.rejected.WithLabelValues(limitToken).Inc()
		return nil, errorf(http.StatusTooManyRequests, kindTooManyRequests,
			"this token has %d long polls and event streams open, the most the server allows per token; end one, or retry after Retry-After seconds", w.perToken)
	case w.n >= w.total:
		w.rejected.WithLabelValues(limitProcess).Inc()
		return nil, errorf(http.StatusTooManyRequests, kindTooManyRequests,
			"the server has the most long polls and event streams open it allows; retry after Retry-After seconds")
	}
	w.byToken[key]++
	w.n++
	w.open.WithLabelValues(kind).Inc()
	var once gosync.Once
	return func() { once.Do(func() { w.leave(key, kind) }) }, nil
}

func (w *waiters) leave(key, kind string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byToken[key]--; w.byToken[key] == 0 {
		delete(w.byToken, key)
	}
	w.n--
	w.open.WithLabelValues(kind).Dec()
}
