package jetstream_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the pools' connections and loops end with the
// tests that made them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
