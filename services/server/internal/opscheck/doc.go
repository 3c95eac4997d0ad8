// Package opscheck holds tests that hold the operations artefacts in ops/
// to the code: every role's /metrics passes "promtool check metrics", every
// metric the Grafana dashboards query is one the server exports, and every
// SQL statement of the runbooks plans on a migrated database.
// They start the real server in-process on a test database; the package has
// no code of its own.
package opscheck
