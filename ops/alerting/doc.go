// Package alerting holds bothy's Prometheus alert rules (*.rules.yml) and
// their promtool unit tests (*.test.yml); the Go test in this package runs
// promtool on them, so "go test ./..." checks the rules too. The runbooks
// are in ops/alerting.md, the signals in ops/signals.md.
package alerting
