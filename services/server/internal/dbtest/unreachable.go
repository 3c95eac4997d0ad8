package dbtest

import (
	"net"
	"testing"
)

// UnreachableURL returns a PostgreSQL URL on a loopback port where nothing
// listens (it was free a moment ago), for tests of what a database outage
// looks like: connecting is refused at once.
func UnreachableURL(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	return "postgres://postgres@" + addr + "/bothy?sslmode=disable&connect_timeout=5"
}
