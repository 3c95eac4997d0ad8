package webhookstest

import (
	"net/http"
	"strconv"
	"time"
)

// Answer is how an endpoint answers one request.
type Answer struct {
	// Status is the answer's status; 0 is 200.
	Status int
	// Header is set on the answer (Retry-After, say); Body is its body
	// ("": "ok").
	Header map[string]string
	Body   string
	// Delay holds the request that long before answering; the hold ends
	// early if the sender gives up.
	Delay time.Duration
	// Hang holds the request until the sender gives up, or until the
	// endpoint's Release or the receiver's Close.
	Hang bool
}

// Rule chooses the answer to an arrival. It runs with its endpoint's lock
// held, so it may keep state of its own without one, and must not block
// nor call the endpoint's methods.
type Rule func(a *Arrival) Answer

// Status answers every request with code.
func Status(code int) Rule { return Always(Answer{Status: code}) }

// Always answers every request with ans.
func Always(ans Answer) Rule { return func(*Arrival) Answer { return ans } }

// FailFirst answers the first n attempts at each seq with ans, and then
// 200.
func FailFirst(n int, ans Answer) Rule {
	return func(a *Arrival) Answer {
		if a.Attempt <= n {
			return ans
		}
		return Answer{}
	}
}

// RetryAfter is an answer with code and a Retry-After of d (whole seconds,
// rounded up).
func RetryAfter(code int, d time.Duration) Answer {
	secs := int64((d + time.Second - 1) / time.Second)
	return Answer{Status: code, Header: map[string]string{"Retry-After": strconv.FormatInt(secs, 10)}}
}

// Gone is the answer that tells a sender the endpoint is gone for good.
var Gone = Answer{Status: http.StatusGone}

// status is the status the answer sends.
func (a Answer) status() int {
	if a.Status == 0 {
		return http.StatusOK
	}
	return a.Status
}

// Verified answers 401 to a request that did not verify under the
// endpoint's secret (or came before it had one), and the others by next
// (nil: 200).
func Verified(next Rule) Rule {
	return func(a *Arrival) Answer {
		if !a.Verified {
			return Answer{Status: http.StatusUnauthorized}
		}
		if next == nil {
			return Answer{}
		}
		return next(a)
	}
}
