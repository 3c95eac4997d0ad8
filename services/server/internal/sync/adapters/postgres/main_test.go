package postgres_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// TestMain fails the package if a worker, listener or notifier goroutine
// outlives the tests that started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(dbtest.Background(m))
}
