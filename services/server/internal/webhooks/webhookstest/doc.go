// Package webhookstest is the one webhook receiver of the tests and the
// load tools: an http.Handler (Receiver) that verifies every request's
// Standard Webhooks signature, records each arrival per endpoint in order
// (headers, webhook-id, events, attempt, answer), tells repeats and
// out-of-order arrivals apart, and answers by a programmable Rule: a
// status (with Retry-After, 410, …), a delay, or a hang until the sender
// gives up or the test releases it.
//
// An endpoint is one path, /hook/{name}, usually one subscription's URL.
// NewServer serves a Receiver on loopback with net/http/httptest; a load
// tool serves it on its own listener. Arrivals that come another way (a
// broker's consumer) go through Receiver.Accept.
//
// The package has no testing dependency, so a command may use it; the
// waiting helpers of tests are in package recvtest.
package webhookstest
