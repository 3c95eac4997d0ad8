package brokertest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// noConfirmsEnv, set in a child test process, makes a conformance test's
// pool skip the broker's confirmation.
const noConfirmsEnv = "BOTHY_TEST_BROKER_NO_CONFIRMS"

// WithoutConfirms says whether this process is the child that
// RequireFailsWithoutConfirms starts: the conformance test then makes its
// pool skip the broker's confirmation.
func WithoutConfirms() bool { return os.Getenv(noConfirmsEnv) != "" }

// RequireFailsWithoutConfirms runs the test named test (a conformance
// test) in a child process whose pool skips the broker's confirmation,
// and fails tb unless the child fails with every one of wants in its
// output (subtests' FAIL lines, the suite's messages). In the child it
// does nothing.
func RequireFailsWithoutConfirms(tb testing.TB, test string, wants ...string) {
	tb.Helper()
	if WithoutConfirms() {
		return
	}
	cmd := exec.CommandContext(tb.Context(), os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), noConfirmsEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		tb.Fatalf("brokertest: %s passed without the broker's confirmation:\n%s", test, out)
	}
	for _, w := range wants {
		if !strings.Contains(string(out), w) {
			tb.Fatalf("brokertest: %s without the broker's confirmation did not fail with %q:\n%s", test, w, out)
		}
	}
}
