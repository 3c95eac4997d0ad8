package httpapi_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// TestMain fails the package if a server, River client or receiver
// goroutine outlives the tests. Idle keep-alive connections of the test
// client and the delivery client close with their transports, so those are
// ignored.
//
// Every request the tests send with http.DefaultClient (send, and so
// testBundle.do) is checked against openapi/bothy.json on its way back
// (validateAgainstOpenAPI): a response the document does not describe
// fails the test that got it, and a documented operation no test reached
// fails the package.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(dbtest.Background(validateAgainstOpenAPI(m)),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
