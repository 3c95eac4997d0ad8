package eventpull

import (
	"fmt"
	"io"
)

// result is the run's figures.
type result struct {
	Load      string        `json:"load_before"`
	LoadAfter string        `json:"load_after"`
	Puller    *pullerResult `json:"one_puller"`
	Live      *liveResult   `json:"long_pollers"`
}

func (r *result) report(w io.Writer) {
	p, l := r.Puller, r.Live
	fmt.Fprintf(w, "event_pull: load average %s before, %s after\n", r.Load, r.LoadAfter)
	fmt.Fprintf(w, "one puller, dense space:  %d events in %d pages, %.0f events/s\n", p.DenseEvents, p.DensePages, p.DenseEventsPerS)
	fmt.Fprintf(w, "one puller, sparse space: %d events among %d seqs in %d pages, %.0f events/s (%.0f seqs examined/s)\n",
		p.SparseEvents, p.SparseLogSeqs, p.SparsePages, p.SparseEventsPerS, p.SparseSeqsPerS)
	fmt.Fprintf(w, "long-pollers: %d events appended (%.0f/s), %d received by the pollers (%.0f/s) in %d requests\n",
		l.Appended, l.AppendedPerS, l.Received, l.ReceivedPerS, l.Requests)
	fmt.Fprintf(w, "commit to answer: p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms\n", l.P50MS, l.P95MS, l.P99MS, l.MaxMS)
	fmt.Fprintf(w, "checks: %d missing, %d twice, %d out of order\n", l.Missing, l.Duplicates, l.OutOfOrder)
}
