package sync

import (
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"
)

// TraceParentLen is the length of a W3C traceparent of version 00, the
// only form the log stores.
const TraceParentLen = 55

// FormatTraceParent returns sc as a W3C traceparent (version 00), or "" if
// sc is not valid.
func FormatTraceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return fmt.Sprintf("00-%s-%s-%02x", sc.TraceID(), sc.SpanID(), byte(sc.TraceFlags()))
}

// ParseTraceParent reads a W3C traceparent of version 00: exactly
// TraceParentLen characters, lower-case hex, trace and span ids not all
// zero. It returns the remote span context and whether v was one; anything
// else, from the log or a job's metadata, is ignored rather than trusted.
func ParseTraceParent(v string) (trace.SpanContext, bool) {
	if len(v) != TraceParentLen || v[0] != '0' || v[1] != '0' || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	for _, f := range []struct {
		dst []byte
		src string
	}{{tid[:], v[3:35]}, {sid[:], v[36:52]}, {flags[:], v[53:55]}} {
		if !lowerHex(f.src) {
			return trace.SpanContext{}, false
		}
		if _, err := hex.Decode(f.dst, []byte(f.src)); err != nil {
			return trace.SpanContext{}, false
		}
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]), Remote: true})
	return sc, sc.IsValid()
}

func lowerHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// EventArgs is an optional capability of a Job's Args, found by type
// assertion: the seq of the event the job serves (the first of them, if it
// serves several). The round carries that event's trace context into the
// job's metadata, so the job's spans join the producer's trace; a job
// without it joins the round's.
type EventArgs interface {
	EventSeq() int64
}

// metadataKey is the key of the trace context in a River job's metadata,
// as OpenTelemetry's River middleware (otelriver) names it.
const metadataKey = "traceparent"

// carryTraceParents sets the metadata of every job whose Args name an event
// of events (EventArgs) that has a trace context. events are in seq order.
func carryTraceParents(jobs []Job, events []Event) error {
	for i := range jobs {
		ea, ok := jobs[i].Args.(EventArgs)
		if !ok {
			continue
		}
		e := eventAt(events, ea.EventSeq())
		if e == nil || e.TraceParent == "" {
			continue
		}
		opts := river.InsertOpts{}
		if jobs[i].Opts != nil {
			opts = *jobs[i].Opts
		}
		meta := map[string]any{}
		if len(opts.Metadata) > 0 {
			if err := json.Unmarshal(opts.Metadata, &meta); err != nil {
				return fmt.Errorf("job %d: metadata: %w", i, err)
			}
		}
		if _, set := meta[metadataKey]; set {
			continue
		}
		meta[metadataKey] = e.TraceParent
		b, err := json.Marshal(meta)
		if err != nil {
			return fmt.Errorf("job %d: metadata: %w", i, err)
		}
		opts.Metadata = b
		jobs[i].Opts = &opts
	}
	return nil
}

// eventAt finds the event with seq in events (sorted by seq), or nil.
func eventAt(events []Event, seq int64) *Event {
	lo, hi := 0, len(events)
	for lo < hi {
		m := (lo + hi) / 2
		switch {
		case events[m].Seq < seq:
			lo = m + 1
		case events[m].Seq > seq:
			hi = m
		default:
			return &events[m]
		}
	}
	return nil
}
