package webhookpolicies

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// result is one run's figures and findings.
type result struct {
	events   int
	measured time.Duration // the load's length
	drained  time.Duration // after the load until the unordered one had all; < 0: it did not

	// unordered
	duringLoad  int     // distinct events answered 2xx while the load ran
	rate        float64 // duringLoad per second of load
	totalRate   float64 // every event per second from the load's start to the last answer
	p50, p95    time.Duration
	top         int // most requests in flight at once
	avgInFlight float64
	lost        []int64
	repeated    []int64
	badSigsUnor int

	// ordered
	orderedSent  int
	orderedRate  float64
	outOfOrder   []string
	badSigsOrd   int
	orderedTop   int
	loadBefore   string
	loadAfter    string
	offeredRate  float64
	maxInFlight  int
	receiverWait time.Duration
}

// result judges what the receiver saw.
func (h *harness) result(seqs []int64, start, loadEnd time.Time, drained time.Duration) *result {
	o := h.opts
	res := &result{events: len(seqs), measured: loadEnd.Sub(start), drained: drained, offeredRate: o.rate,
		maxInFlight: o.maxInFlight, receiverWait: o.latency}

	_, answers, bad, top := h.rcv.stream(unordered).snapshot()
	res.badSigsUnor, res.top = bad, top
	res.avgInFlight = h.rcv.stream(unordered).avgInFlight()
	count := map[int64]int{}
	var last time.Time
	var lat []time.Duration
	h.mu.Lock()
	for _, a := range answers {
		count[a.seq]++
		if count[a.seq] == 2 {
			res.repeated = append(res.repeated, a.seq)
		}
		if count[a.seq] > 1 {
			continue
		}
		if !a.at.After(loadEnd) {
			res.duringLoad++
		}
		last = later(last, a.at)
		if c, ok := h.commits[a.seq]; ok {
			lat = append(lat, a.at.Sub(c))
		}
	}
	h.mu.Unlock()
	for _, s := range seqs {
		if count[s] == 0 {
			res.lost = append(res.lost, s)
		}
	}
	res.rate = float64(res.duringLoad) / res.measured.Seconds()
	if len(count) > 0 {
		res.totalRate = float64(len(count)) / last.Sub(start).Seconds()
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		res.p50, res.p95 = lat[len(lat)/2], lat[len(lat)*95/100]
	}

	started, oanswers, obad, otop := h.rcv.stream(ordered).snapshot()
	res.badSigsOrd, res.orderedTop, res.orderedSent = obad, otop, len(oanswers)
	res.orderedRate = float64(len(oanswers)) / time.Since(start).Seconds()
	// Strictly ordered: the requests came in as the events' seqs, from the
	// first, one after another, none twice and none skipped.
	for i, s := range started {
		if i >= len(seqs) || s != seqs[i] {
			want := "nothing"
			if i < len(seqs) {
				want = fmt.Sprint(seqs[i])
			}
			res.outOfOrder = append(res.outOfOrder, fmt.Sprintf("request %d was seq %d, want %s", i+1, s, want))
			if len(res.outOfOrder) == 5 {
				break
			}
		}
	}
	return res
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (r *result) summary(o *options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "webhook_policies: %d events at %g/s for %s; receiver answers each request in %s and verifies every signature\n",
		r.events, r.offeredRate, r.measured.Round(time.Millisecond), r.receiverWait)
	fmt.Fprintf(&b, "unordered (max_in_flight %d): %.1f events/s delivered during the load (%d events), %.1f events/s over the whole run",
		r.maxInFlight, r.rate, r.duringLoad, r.totalRate)
	if r.drained >= 0 {
		fmt.Fprintf(&b, ", all delivered %s after the load", r.drained.Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, ", NOT all delivered within %s after the load", o.drain)
	}
	fmt.Fprintf(&b, "\n  commit to 2xx p50 %s p95 %s; requests in flight at the receiver: %.1f on average, at most %d; lost %d, delivered twice %d, bad signatures %d\n",
		r.p50.Round(time.Millisecond), r.p95.Round(time.Millisecond), r.avgInFlight, r.top, len(r.lost), len(r.repeated), r.badSigsUnor)
	fmt.Fprintf(&b, "ordered: %d events delivered (%.1f/s, one request at a time: at most %d in flight), strictly in seq order: %v; bad signatures %d\n",
		r.orderedSent, r.orderedRate, r.orderedTop, len(r.outOfOrder) == 0, r.badSigsOrd)
	for _, s := range r.outOfOrder {
		fmt.Fprintf(&b, "  out of order: %s\n", s)
	}
	fmt.Fprintf(&b, "machine load average (1 5 15 min): %s before, %s after\n", r.loadBefore, r.loadAfter)
	return b.String()
}

// verdict returns nil, or the first failed check.
func (r *result) verdict(o *options) error {
	switch {
	case r.badSigsUnor+r.badSigsOrd > 0:
		return fmt.Errorf("%w: %d requests failed signature verification", ErrFailed, r.badSigsUnor+r.badSigsOrd)
	case len(r.lost) > 0:
		return fmt.Errorf("%w: unordered: %d events never delivered (first %d)", ErrFailed, len(r.lost), r.lost[0])
	case len(r.repeated) > 0:
		return fmt.Errorf("%w: unordered: %d events delivered twice (first %d)", ErrFailed, len(r.repeated), r.repeated[0])
	case r.top > o.maxInFlight:
		return fmt.Errorf("%w: unordered: %d requests in flight, max_in_flight %d", ErrFailed, r.top, o.maxInFlight)
	case len(r.outOfOrder) > 0 || r.orderedTop > 1:
		return fmt.Errorf("%w: ordered: %s (%d in flight at once)", ErrFailed, strings.Join(r.outOfOrder, "; "), r.orderedTop)
	case r.orderedSent == 0:
		return fmt.Errorf("%w: ordered: nothing delivered", ErrFailed)
	case o.goal > 0 && r.rate < o.goal:
		return fmt.Errorf("%w: unordered delivered %.1f events/s, goal %g", ErrBelowGoal, r.rate, o.goal)
	}
	return nil
}
