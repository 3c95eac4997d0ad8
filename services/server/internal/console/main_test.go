package console_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// TestMain fails the package if a server or receiver goroutine outlives
// the tests; idle keep-alive connections of the clients are ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(dbtest.Background(m),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
