package httpapi_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a server, River client or receiver
// goroutine outlives the tests. Idle keep-alive connections of the test
// client and the delivery client close with their transports, so those are
// ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
