// Package promtooltest finds the promtool binary for tests that check alert
// rules and metrics with it.
package promtooltest

import (
	"os"
	"os/exec"
	"testing"
)

// Path returns the promtool binary. Without one the test fails in CI (CI
// set) and is skipped elsewhere, saying how to install it.
func Path(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	msg := "promtool not found in PATH: apt-get install -y --no-install-recommends prometheus"
	if os.Getenv("CI") != "" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
	return ""
}
