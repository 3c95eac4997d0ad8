package httpapi

import (
	"crypto/sha256"
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
// Retry-After before it reads anything; one of a token already at its
// limit even before it is authenticated (shed), so that a client retrying
// in a loop costs no query.

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

// waiters counts the open long polls and streams, per token and in all,
// and holds the metrics of event pull. It is safe for concurrent use.
type waiters struct {
	perToken, total int

	mu      gosync.Mutex
	byToken map[string]*tokenWaiters
	// bearers finds, by the SHA-256 of the bearer secret they were
	// authenticated with, the tokens that have waiters open.
	bearers map[[sha256.Size]byte]string
	n       int

	open     *prometheus.GaugeVec
	rejected *prometheus.CounterVec
	stalled  prometheus.Counter
}

// tokenWaiters are the open waiters of one token.
type tokenWaiters struct {
	n      int
	bearer [sha256.Size]byte
}

func newWaiters(perToken, total int, reg prometheus.Registerer) *waiters {
	w := &waiters{perToken: perToken, total: total, byToken: map[string]*tokenWaiters{}, bearers: map[[sha256.Size]byte]string{},
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

// enter counts a waiter of kind of s, authenticated with bearer ("" if
// none was sent), or refuses it with a 429 when its token or the process
// has the most open already; leave uncounts it.
func (w *waiters) enter(s *authz.Subject, bearer, kind string) (leave func(), err error) {
	key := "principal:" + s.Principal
	if s.TokenID != uuid.Nil {
		key = "token:" + s.TokenID.String()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	tw := w.byToken[key]
	switch {
	case tw != nil && tw.n >= w.perToken:
		return nil, w.refuseToken()
	case w.n >= w.total:
		w.rejected.WithLabelValues(limitProcess).Inc()
		return nil, errorf(http.StatusTooManyRequests, kindTooManyRequests,
			"the server has the most long polls and event streams open it allows; retry after Retry-After seconds")
	}
	if tw == nil {
		tw = &tokenWaiters{}
		if bearer != "" {
			tw.bearer = sha256.Sum256([]byte(bearer))
			w.bearers[tw.bearer] = key
		}
		w.byToken[key] = tw
	}
	tw.n++
	w.n++
	w.open.WithLabelValues(kind).Inc()
	var once gosync.Once
	return func() { once.Do(func() { w.leave(key, kind) }) }, nil
}

func (w *waiters) leave(key, kind string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	tw := w.byToken[key]
	if tw.n--; tw.n == 0 {
		delete(w.byToken, key)
		delete(w.bearers, tw.bearer)
	}
	w.n--
	w.open.WithLabelValues(kind).Dec()
}

// shed refuses a waiter sent with bearer when the token that bearer
// authenticated has the most waiters open already, as enter would once
// it is authenticated again: only that token's holder can send its
// secret, so the refusal needs no query. Otherwise it returns nil.
func (w *waiters) shed(bearer string) error {
	if bearer == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(bearer))
	w.mu.Lock()
	defer w.mu.Unlock()
	if tw := w.byToken[w.bearers[sum]]; tw != nil && tw.bearer == sum && tw.n >= w.perToken {
		return w.refuseToken()
	}
	return nil
}

func (w *waiters) refuseToken() error {
	w.rejected.WithLabelValues(limitToken).Inc()
	return errorf(http.StatusTooManyRequests, kindTooManyRequests,
		"this token has %d long polls and event streams open, the most the server allows per token; end one, or retry after Retry-After seconds", w.perToken)
}
