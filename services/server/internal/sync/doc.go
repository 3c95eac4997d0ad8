// Package sync is the domain of bothy's event log and of the consumers that
// turn committed events into outside effects (webhook deliveries, push
// notifications).
//
// The log is commit-ordered and gapless: seq n+1 is only handed out once the
// transaction holding seq n is committed and visible. Consumers rely on that
// property: a reader that has seen seq n has seen everything below it, so a
// single integer (the cursor's last_seq) is all a consumer needs to resume.
//
// The package holds the types and the ports; pgx and River implement them in
// adapters/postgres. It is named sync by the design card; import the standard
// library's package as gosync where both are needed.
package sync
