// Package testwait is the tests' one way to wait for a condition: poll it
// with a deadline, never sleep a fixed time and hope.
package testwait

import (
	"fmt"
	"testing"
	"time"
)

// Every is how often Until polls.
const Every = 5 * time.Millisecond

// Until polls cond every Every until it holds, and fails t (Fatal) naming
// what it waited for (format and args, as fmt.Sprintf) once d has passed.
func Until(t testing.TB, d time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", d, fmt.Sprintf(format, args...))
		}
		time.Sleep(Every)
	}
}
