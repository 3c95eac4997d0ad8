// Command event_pull is the load test of pulling events over HTTP: events/s
// to one puller through a backlog, and to long-pollers while events are
// appended, with the time from each commit to the answer holding it.
//
//	go run ./perf/event_pull [--backlog 100000] [--sparse 10] [--rate 500/s] [--duration 20s] [--pollers 100]
//	    [--spaces 10] [--producers 4] [--short] [--json] [--config FILE] [--keep]
//	go run ./perf/event_pull --flood 1000 [--flood-kind poll|stream] [--flood-limit N] [--duration 20s] [--producers 4]
//
// It exits 1 when a poller missed an event, got one twice or out of order,
// the flood got a 5xx, or the run failed. See package eventpull for what it does.
package main

import (
	"github.com/bothy/bothy/services/server/loadtest/eventpull"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

func main() {
	harness.Main("event_pull", eventpull.Run)
}
