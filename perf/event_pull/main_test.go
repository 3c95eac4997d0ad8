package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/loadtest/eventpull"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// TestEventPullShort runs the load test in its short mode (a backlog of
// 2000 events, then 10 long-pollers on 5 spaces for 3 s at 50 events/s)
// and requires every poller to get every event of its space once, in seq
// order, and the JSON line to carry the figures. The figures themselves
// belong to the tool's own run, not to a test sharing the machine.
func TestEventPullShort(t *testing.T) {
	out, err := harness.RunForTest(t, eventpull.Run, nil, "--short", "--json")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var line struct {
		Puller map[string]float64 `json:"one_puller"`
		Live   map[string]float64 `json:"long_pollers"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &line))
	require.EqualValues(t, 2000, line.Puller["dense_events"])
	require.EqualValues(t, 200, line.Puller["sparse_events"])
	require.EqualValues(t, 150, line.Live["appended"])
	require.EqualValues(t, 300, line.Live["received"], "each event to the 2 pollers of its space")
	for _, k := range []string{"missing", "duplicates", "out_of_order"} {
		require.Zero(t, line.Live[k], k)
	}
	require.Greater(t, line.Live["p95_ms"], 0.0)
}

// TestEventPullFloodShort runs the flood mode briefly (20 long polls of one
// token allowed 10) and requires both phases to have measured the
// neighbours, the flood beyond the limit to be refused with 429 and none
// of it to get a 5xx. The comparison itself belongs to the tool's own run.
func TestEventPullFloodShort(t *testing.T) {
	out, err := harness.RunForTest(t, eventpull.Run, nil, "--short", "--json", "--flood", "20", "--flood-limit", "10")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var line struct {
		Flood struct {
			Quiet   map[string]float64 `json:"without_flood"`
			Flooded map[string]float64 `json:"with_flood"`
			Answers map[string]float64 `json:"flood"`
		} `json:"flood"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &line))
	for _, ph := range []map[string]float64{line.Flood.Quiet, line.Flood.Flooded} {
		require.Positive(t, ph["gets"])
		require.Positive(t, ph["appended"])
		require.Zero(t, ph["failed"])
	}
	require.Positive(t, line.Flood.Answers["limited_429"], "10 of the 20 are beyond the token's limit")
	require.Zero(t, line.Flood.Answers["server_5xx"])
	require.EqualValues(t, 20, line.Flood.Answers["started"])
}
