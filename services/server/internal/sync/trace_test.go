package sync

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

func TestTraceParent_FormatAndParse(t *testing.T) {
	t.Parallel()
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled})

	t.Run("RoundTrips", func(t *testing.T) {
		tp := FormatTraceParent(sc)
		require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tp)
		require.Len(t, tp, TraceParentLen)
		got, ok := ParseTraceParent(tp)
		require.True(t, ok)
		require.Equal(t, sc.TraceID(), got.TraceID())
		require.Equal(t, sc.SpanID(), got.SpanID())
		require.True(t, got.IsSampled())
		require.True(t, got.IsRemote())
	})

	t.Run("FormatsNothingWithoutASpan", func(t *testing.T) {
		require.Empty(t, FormatTraceParent(trace.SpanContext{}))
	})

	t.Run("RefusesAnythingElse", func(t *testing.T) {
		for _, v := range []string{
			"",
			"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",     // another version
			"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",     // upper case
			"00-00000000000000000000000000000000-00f067aa0ba902b7-01",     // zero trace id
			"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",     // zero span id
			"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz", // too long
			"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",     // separator
			"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",     // not hex
			strings.Repeat("0", TraceParentLen),
		} {
			_, ok := ParseTraceParent(v)
			require.False(t, ok, "%q", v)
		}
	})
}

type seqArgs struct{ Seq int64 }

func (seqArgs) Kind() string      { return "test.seq" }
func (a seqArgs) EventSeq() int64 { return a.Seq }

type plainArgs struct{}

func (plainArgs) Kind() string { return "test.plain" }

func TestCarryTraceParents_SetsTheEventsTraceContextOnItsJobs(t *testing.T) {
	t.Parallel()
	const tp1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	events := []Event{{Seq: 3, TraceParent: tp1}, {Seq: 4}, {Seq: 7, TraceParent: tp1}}
	jobs := []Job{
		{Args: seqArgs{Seq: 3}},
		{Args: seqArgs{Seq: 4}}, // event not traced
		{Args: seqArgs{Seq: 5}}, // not in the batch
		{Args: plainArgs{}},     // names no event
		{Args: seqArgs{Seq: 7}, Opts: &river.InsertOpts{Queue: "q", Metadata: []byte(`{"a":1}`)}},           // keeps what it had
		{Args: seqArgs{Seq: 3}, Opts: &river.InsertOpts{Metadata: []byte(`{"traceparent":"` + tp2 + `"}`)}}, // its own context wins
	}
	require.NoError(t, carryTraceParents(jobs, events))
	require.JSONEq(t, `{"traceparent":"`+tp1+`"}`, string(jobs[0].Opts.Metadata))
	require.Nil(t, jobs[1].Opts)
	require.Nil(t, jobs[2].Opts)
	require.Nil(t, jobs[3].Opts)
	require.Equal(t, "q", jobs[4].Opts.Queue)
	var meta map[string]any
	require.NoError(t, json.Unmarshal(jobs[4].Opts.Metadata, &meta))
	require.Equal(t, map[string]any{"a": 1.0, "traceparent": tp1}, meta)
	require.JSONEq(t, `{"traceparent":"`+tp2+`"}`, string(jobs[5].Opts.Metadata))
}
