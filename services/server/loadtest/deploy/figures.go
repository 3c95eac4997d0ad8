package deploy

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// Quantiles are p50, p95, p99 and max in milliseconds, as a report's JSON
// line gives them.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// QuantilesOf sorted latencies; nil for none.
func QuantilesOf(sorted []time.Duration) *Quantiles {
	if len(sorted) == 0 {
		return nil
	}
	return &Quantiles{P50: Millis(harness.Quantile(sorted, .5)), P95: Millis(harness.Quantile(sorted, .95)),
		P99: Millis(harness.Quantile(sorted, .99)), Max: Millis(sorted[len(sorted)-1])}
}

// Print writes one line of q, labelled what.
func (q *Quantiles) Print(w io.Writer, what string) {
	if q == nil {
		fmt.Fprintf(w, "  %s: none arrived\n", what)
		return
	}
	fmt.Fprintf(w, "  %-24s p50 %8.1f ms  p95 %8.1f ms  p99 %8.1f ms  max %8.1f ms\n", what+":", q.P50, q.P95, q.P99, q.Max)
}

// Millis is d in milliseconds to three decimals.
func Millis(d time.Duration) float64 { return math.Round(float64(d.Microseconds())) / 1000 }

// PerMS divides a CPU time by n, in milliseconds to four decimals.
func PerMS(d time.Duration, n int) float64 {
	return math.Round(float64(d)/float64(time.Millisecond)/float64(max(n, 1))*1e4) / 1e4
}

// Per divides v by n, to four decimals.
func Per(v int64, n int) float64 { return math.Round(float64(v)/float64(max(n, 1))*1e4) / 1e4 }

// Latencies are the arrivals of what a phase's events caused, from each
// event's request's send and from its 201.
type Latencies struct {
	// FromSend and FromAck are sorted.
	FromSend, FromAck []time.Duration
	// Buckets are the from-send latencies by the 10 s of the phase their
	// request was sent in.
	Buckets []Bucket
}

// Bucket is the from-send latencies of the requests sent in 10 s of a
// phase.
type Bucket struct {
	// From is the start of the 10 s, from the phase's first send.
	From          time.Duration
	N             int
	P50, P95, P99 time.Duration
}

// NewLatencies takes the latencies of sent's events, each arriving at the
// times arrivals gives for it (a delivery per subscription, a message per
// device; none for what did not arrive).
func NewLatencies(sent []Sent, arrivals func(Sent) []time.Time) *Latencies {
	l := &Latencies{}
	var start int64 = math.MaxInt64
	for _, s := range sent {
		start = min(start, s.Send)
	}
	byBucket := map[int][]time.Duration{}
	for _, s := range sent {
		for _, at := range arrivals(s) {
			send := at.Sub(time.Unix(0, s.Send))
			l.FromSend = append(l.FromSend, send)
			l.FromAck = append(l.FromAck, at.Sub(time.Unix(0, s.Ack)))
			b := int((s.Send - start) / int64(10*time.Second))
			byBucket[b] = append(byBucket[b], send)
		}
	}
	slices.Sort(l.FromSend)
	slices.Sort(l.FromAck)
	for _, b := range slices.Sorted(maps.Keys(byBucket)) {
		st := harness.NewStage("", byBucket[b])
		l.Buckets = append(l.Buckets, Bucket{From: time.Duration(b) * 10 * time.Second, N: st.N, P50: st.P50, P95: st.P95, P99: st.P99})
	}
	return l
}

// PrintBuckets writes a line per bucket, counting what arrived as what
// ("deliveries", "messages").
func (l *Latencies) PrintBuckets(w io.Writer, what string) {
	for _, k := range l.Buckets {
		fmt.Fprintf(w, "  sent at +%3.0fs: %6d %s, p50 %s p95 %s p99 %s (from the send)\n", k.From.Seconds(), k.N, what,
			harness.MS(k.P50), harness.MS(k.P95), harness.MS(k.P99))
	}
}
