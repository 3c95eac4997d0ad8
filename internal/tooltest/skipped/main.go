// Command skipped prints one line naming the tests that go test skipped
// because a program they need is not installed (package tooltest), and the
// command that installs it. The README's test command ends with it, since
// go test ./... shows skipped tests only with -v. Under CI (CI=true) a
// missing tool also makes it exit 1.
//
//	go test -count=1 -timeout 30m ./... && go run ./internal/tooltest/skipped
package main

import (
	"fmt"
	"os"

	"github.com/bothy/bothy/internal/tooltest"
)

func main() {
	missing := tooltest.Missing()
	fmt.Println(tooltest.Summary(missing))
	if len(missing) > 0 && tooltest.CI() {
		os.Exit(1)
	}
}
