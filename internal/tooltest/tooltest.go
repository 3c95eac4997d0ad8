// Package tooltest is how a test says it needs a program from outside Go:
// promtool, Chromium, the PostgreSQL server binaries, pg_autoctl or a
// broker (RabbitMQ). Without
// the program the test fails under CI (CI=true), which installs them all,
// and is skipped elsewhere, naming the program and the command that
// installs it. Since go test ./... shows a skipped test only with -v, the
// README's test command ends with `go run ./internal/tooltest/skipped`,
// which prints one line naming what was skipped and how to install it.
// Every skip in the module goes through Need unless it is for -short
// (TestSkipsGoThroughNeed), so that line misses none.
package tooltest

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bothy/bothy/internal/pgbin"
)

// Tool is a program some tests need.
type Tool struct {
	// Name names it in messages.
	Name string
	// For says which tests need it.
	For string
	// find returns its path, or why it is not there.
	find func() (string, error)
	// packages are the Debian packages that install it.
	packages func() []string
}

// The tools, in the order the summary names them.
var (
	Promtool = &Tool{Name: "promtool", For: "the alert rule and metric tests", find: lookPath("promtool"), packages: fixed("prometheus")}
	Chromium = &Tool{Name: "chromium", For: "the web console's browser tests", find: lookPath("chromium"), packages: fixed("chromium")}
	// PostgresServer is initdb and pg_ctl, for private clusters.
	PostgresServer = &Tool{Name: "PostgreSQL server binaries", For: "the crash tests, the soak and the load tests' private clusters",
		find: pgbin.Server, packages: fixed("postgresql")}
	// Autoctl is pg_autoctl with the monitor's extension for the local
	// PostgreSQL.
	Autoctl = &Tool{Name: "pg_autoctl", For: "the failover test", find: findAutoctl, packages: autoctlPackages}
	// Root is running as root with a postgres user to run PostgreSQL as:
	// what bothy dev --ha does with its directories then. No package
	// brings it; CI runs as root.
	Root = &Tool{Name: "root", For: "the tests of running as root", find: findRoot, packages: fixed()}
	// RabbitMQ is a broker answering at BOTHY_TEST_RABBITMQ_URL (default
	// amqp://guest:guest@127.0.0.1:5672/); Need returns that URL.
	RabbitMQ = &Tool{Name: "RabbitMQ", For: "the RabbitMQ destination tests", find: findBroker("BOTHY_TEST_RABBITMQ_URL",
		"amqp://guest:guest@127.0.0.1:5672/"), packages: fixed("rabbitmq-server")}

	All = []*Tool{Promtool, Chromium, PostgresServer, Autoctl, Root, RabbitMQ}
)

// Need returns the path of tool. Without it, it fails tb under CI and
// skips it elsewhere, saying what is missing and how to install it.
func Need(tb testing.TB, tool *Tool) string {
	tb.Helper()
	p, err := tool.find()
	if err == nil {
		return p
	}
	msg := tool.Name + " not found (" + err.Error() + ")" + installHint([]*Tool{tool})
	if CI() {
		tb.Fatal(msg + " (CI=true: a missing tool fails the run)")
	}
	tb.Skip(msg)
	return ""
}

// CI reports whether the tests run in CI: CI is set to anything but
// "false" or "0".
func CI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// Missing lists the tools not found on this machine, in the order of All.
func Missing() []*Tool {
	var out []*Tool
	for _, t := range All {
		if _, err := t.find(); err != nil {
			out = append(out, t)
		}
	}
	return out
}

// InstallCommand is the apt-get command that installs tools.
func InstallCommand(tools []*Tool) string {
	var pkgs []string
	for _, t := range tools {
		for _, p := range t.packages() {
			if !slices.Contains(pkgs, p) {
				pkgs = append(pkgs, p)
			}
		}
	}
	return "apt-get install -y --no-install-recommends " + strings.Join(pkgs, " ")
}

// Summary is the line the README's test command ends with: the tools whose
// tests were skipped, and the command that installs them; or that none
// was.
func Summary(missing []*Tool) string {
	if len(missing) == 0 {
		names := make([]string, len(All))
		for i, t := range All {
			names[i] = t.Name
		}
		return "tooltest: no test skipped for a missing tool (found " + strings.Join(names, ", ") + ")"
	}
	parts := make([]string, len(missing))
	for i, t := range missing {
		parts[i] = t.For + " (no " + t.Name + ")"
	}
	return "tooltest: SKIPPED " + strings.Join(parts, ", ") + installHint(missing)
}

// installHint is "; install: " and the command that installs tools, plus
// "; run as root" when Root is among them.
func installHint(tools []*Tool) string {
	var s string
	if slices.ContainsFunc(tools, func(t *Tool) bool { return len(t.packages()) > 0 }) {
		s = "; install: " + InstallCommand(tools)
	}
	if slices.Contains(tools, Root) {
		s += "; run as root"
	}
	return s
}

func findRoot() (string, error) {
	if os.Geteuid() != 0 {
		return "", errors.New("not running as root")
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return "", errors.New("running as root, and there is no postgres user")
	}
	return u.HomeDir, nil
}

func lookPath(name string) func() (string, error) {
	return func() (string, error) { return exec.LookPath(name) }
}

func fixed(pkgs ...string) func() []string { return func() []string { return pkgs } }

func findAutoctl() (string, error) {
	bin, err := pgbin.Server()
	if err != nil {
		return "", err
	}
	return pgbin.Autoctl(bin)
}

func autoctlPackages() []string {
	bin, _ := pgbin.Server()
	return pgbin.AutoctlPackages(bin)
}

// findBroker returns the URL in env (def when unset) if its host:port
// accepts a TCP connection within two seconds.
func findBroker(env, def string) func() (string, error) {
	return func() (string, error) {
		raw := cmp.Or(os.Getenv(env), def)
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("%s: not a URL with a host", env)
		}
		c, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
		if err != nil {
			return "", fmt.Errorf("nothing answers at %s (%s)", u.Host, env)
		}
		_ = c.Close()
		return raw, nil
	}
}
