// Package recvtest is what tests add to webhookstest: a receiver that
// closes with the test, and waits for arrivals built on testwait.
package recvtest

import (
	"slices"
	"testing"
	"time"

	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
)

// Wait is how long the waits below wait unless told.
const Wait = 10 * time.Second

// Start serves a receiver (o may be nil) until the end of the test.
func Start(t testing.TB, o *webhookstest.Options) *webhookstest.Server {
	t.Helper()
	s := webhookstest.NewServer(o)
	t.Cleanup(s.Close)
	return s
}

// Endpoint starts a receiver whose endpoint "" answers by rule (nil: 200)
// and returns its URL and endpoint.
func Endpoint(t testing.TB, rule webhookstest.Rule) (string, *webhookstest.Endpoint) {
	t.Helper()
	s := Start(t, nil)
	url := s.URL("")
	ep := s.Endpoint("")
	ep.SetRule(rule)
	return url, ep
}

// Until waits up to d until cond holds of e's arrivals, and fails t
// naming what.
func Until(t testing.TB, d time.Duration, e *webhookstest.Endpoint, cond func([]webhookstest.Arrival) bool, what string) {
	t.Helper()
	testwait.Until(t, d, func() bool { return cond(e.Arrivals()) }, "%s at endpoint %q", what, e.Name())
}

// Count waits until n requests arrived at e.
func Count(t testing.TB, e *webhookstest.Endpoint, n int) {
	t.Helper()
	testwait.Until(t, Wait, func() bool { return e.Count() >= n }, "%d requests at endpoint %q", n, e.Name())
}

// Delivered waits until every seq was answered 2xx at e.
func Delivered(t testing.TB, e *webhookstest.Endpoint, seqs ...int64) {
	t.Helper()
	testwait.Until(t, Wait, func() bool {
		got := e.Delivered()
		for _, s := range seqs {
			if !slices.Contains(got, s) {
				return false
			}
		}
		return true
	}, "seqs %v answered 2xx at endpoint %q", seqs, e.Name())
}
