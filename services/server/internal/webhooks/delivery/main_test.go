package delivery_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// TestMain fails the package if a River client, receiver or HTTP transport
// goroutine outlives the tests that started it. Idle keep-alive connections
// of the delivery client close with their transport's idle timeout, so
// those are ignored. Test databases are made and dropped in the background
// (dbtest.Background). Run with workerChildEnv set, the binary is instead a
// worker process (runWorkerChild) that a test starts and kills.
func TestMain(m *testing.M) {
	if url := os.Getenv(workerChildEnv); url != "" {
		os.Exit(runWorkerChild(url))
	}
	goleak.VerifyTestMain(dbtest.Background(m),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
