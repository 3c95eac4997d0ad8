package webhookhandoff

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/bothy/bothy/services/server/loadtest/cost"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// jsonLine is the last line of --json: the run's figures.
type jsonLine struct {
	Mode string `json:"mode"`
	cost.PerDelivery
	Missing         int `json:"missing"`
	Duplicates      int `json:"duplicates"`
	OrderViolations int `json:"order_violations"`
	BadSignatures   int `json:"bad_signatures"`
	Unexpected      int `json:"unexpected"`
	// Requests is how many requests carried the deliveries (fewer with
	// max_batch).
	Requests      int    `json:"requests"`
	Events        int64  `json:"events"`
	Subscriptions int    `json:"subscriptions"`
	Unordered     int    `json:"unordered"`
	Fanout        int    `json:"fanout"`
	Spaces        int    `json:"spaces"`
	Backlog       int    `json:"backlog,omitempty"`
	MaxBatch      int    `json:"max_batch,omitempty"`
	PrivateServer bool   `json:"private_server"`
	LoadBefore    string `json:"load_before"`
	LoadAfter     string `json:"load_after"`
	// Hand-off mode only: latencies, the offered rate, and the producer
	// process's CPU per event (the database figures hold its share).
	Rate          float64  `json:"rate,omitempty"`
	P50ms         *float64 `json:"p50_ms,omitempty"`
	P95ms         *float64 `json:"p95_ms,omitempty"`
	P99ms         *float64 `json:"p99_ms,omitempty"`
	MaxMS         *float64 `json:"max_ms,omitempty"`
	ProducerCPUms *float64 `json:"producer_cpu_ms_per_event,omitempty"`
}

func (h *handoff) jsonLine(r *result, mode string) jsonLine {
	o := h.opts
	j := jsonLine{Mode: mode, PerDelivery: r.cost, Missing: r.missing, Duplicates: r.duplicates, OrderViolations: r.outOfOrder,
		BadSignatures: r.badSig, Unexpected: r.unexpected, Requests: r.requests, Events: r.events,
		Subscriptions: o.subscriptions, Unordered: o.unordered, Fanout: o.fanout, Spaces: o.spaces, Backlog: o.backlog,
		MaxBatch: o.maxBatch, PrivateServer: h.private != nil, LoadBefore: r.loadBefore, LoadAfter: r.loadAfter}
	if mode == "handoff" {
		ms := func(d time.Duration) *float64 { return new(float64(d.Microseconds()) / 1000) }
		j.Rate, j.P50ms, j.P95ms, j.P99ms, j.MaxMS = o.Rate, ms(r.p50), ms(r.p95), ms(r.p99), ms(r.max)
		j.ProducerCPUms = new(math.Round(float64(r.producerCPU.Microseconds())/float64(max(r.events, 1))) / 1000)
	}
	return j
}

// printJSON writes the JSON line when --json asks for it.
func (h *handoff) printJSON(r *result, mode string) error {
	if !h.opts.json {
		return nil
	}
	b, err := json.Marshal(h.jsonLine(r, mode))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(h.stdout, "%s\n", b)
	return err
}

// verdictErr turns the verdict into the run's error.
func verdictErr(verdict string, onlyP95 bool) error {
	switch {
	case onlyP95:
		return fmt.Errorf("%w: %s", ErrP95OverBudget, verdict)
	case verdict != "":
		return fmt.Errorf("%w: %s", ErrOverBudget, verdict)
	}
	return nil
}

// reportBacklog prints the backlog mode's summary and returns the verdict.
func (h *handoff) reportBacklog(r *result) error {
	o := h.opts
	verdict, _ := r.verdict(0)
	var b strings.Builder
	fmt.Fprintf(&b, "webhook_handoff --backlog: one worker drains a backlog appended while none ran\n")
	h.header(&b)
	fmt.Fprintf(&b, "backlog %d events per subscription, %d subscriptions (%d unordered) on %d spaces, fanout %d, max_batch %s\n",
		o.backlog, o.subscriptions, o.unordered, o.spaces, o.fanout, maxBatchText(o.maxBatch))
	fmt.Fprintf(&b, "load average before %s, after %s\n", r.loadBefore, r.loadAfter)
	h.costText(&b, r)
	b.WriteString(passText(verdict, ""))
	fmt.Fprint(h.stdout, b.String())
	if err := h.printJSON(r, "backlog"); err != nil {
		return err
	}
	return verdictErr(verdict, false)
}

// report prints the hand-off summary, writes it and the histogram into
// --out and returns the verdict as an error.
func (h *handoff) report(r *result, budget time.Duration) error {
	verdict, onlyP95 := r.verdict(budget)
	sum := h.summary(r, budget, verdict)
	fmt.Fprint(h.stdout, sum)
	o := h.opts
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	txt, png := filepath.Join(o.out, "webhook_handoff.txt"), filepath.Join(o.out, "webhook_handoff.png")
	if err := os.WriteFile(txt, []byte(sum), 0o644); err != nil {
		return err
	}
	panel := harness.Panel{
		Title: fmt.Sprintf("%.0f events/s, %d subscriptions on %d spaces: %d deliveries, missing %d",
			o.Rate, o.subscriptions, o.spaces, len(r.latencies), r.missing),
		Axis:      "ms from producer commit to verified webhook request",
		Latencies: r.latencies, P50: r.p50, P95: r.p95, P99: r.p99, Max: r.max,
	}
	if err := harness.WriteHistogram(png, []harness.Panel{panel}, budget); err != nil {
		return fmt.Errorf("histogram: %w", err)
	}
	fmt.Fprintf(h.stdout, "wrote %s and %s\n", txt, png)
	if err := h.printJSON(r, "handoff"); err != nil {
		return err
	}
	return verdictErr(verdict, onlyP95)
}

func (h *handoff) header(b *strings.Builder) {
	server := "the configured server (shared: no PostgreSQL CPU or WAL)"
	if h.private != nil {
		server = "a private PostgreSQL cluster"
	}
	fmt.Fprintf(b, "date %s, %s, %d CPUs, GOMAXPROCS %d, on %s\n", time.Now().UTC().Format(time.RFC3339), runtime.Version(),
		runtime.NumCPU(), runtime.GOMAXPROCS(0), server)
}

func (h *handoff) summary(r *result, budget time.Duration, verdict string) string {
	var b strings.Builder
	ms, o := harness.MS, h.opts
	fmt.Fprintf(&b, "webhook_handoff: producer commit -> webhook request received, signature verified\n")
	h.header(&b)
	fmt.Fprintf(&b, "rate %.0f events/s, %s measured, %d subscriptions (%d unordered) on %d spaces, fanout %d, %d producers, max_batch %s; wall %s\n",
		o.Rate, o.Duration, o.subscriptions, o.unordered, o.spaces, o.fanout, o.Producers, maxBatchText(o.maxBatch), r.wall.Round(time.Second))
	fmt.Fprintf(&b, "load average before %s, after %s\n", r.loadBefore, r.loadAfter)
	fmt.Fprintf(&b, "budget perf.webhook_handoff_p95 = %s\n\n", ms(budget))
	fmt.Fprintf(&b, "%8s %10s %8s %8s %8s %8s %8s %10s %12s %14s\n", "events", "deliveries", "p50", "p95", "p99", "max", "missing", "duplicates", "out-of-order", "bad signatures")
	fmt.Fprintf(&b, "%8d %10d %8s %8s %8s %8s %8d %10d %12d %14d\n", r.events, len(r.latencies), ms(r.p50), ms(r.p95), ms(r.p99), ms(r.max),
		r.missing, r.duplicates, r.outOfOrder, r.badSig)
	fmt.Fprintf(&b, "appended in %s (%.1f events/s committed)\n", r.appending.Round(100*time.Millisecond), float64(r.events)/max(r.appending.Seconds(), 1e-9))
	fmt.Fprintf(&b, "missing: not received %s after the load (--drain); deliveries per second from the load's start to the end of that wait: %.1f\n",
		o.drain, float64(len(r.latencies))/max(r.wall.Seconds(), 1e-9))
	h.stagesText(&b, r)
	fmt.Fprintf(&b, "\nfrom the worker's start to its stop, warm-up included; the database's figures include the producer's transactions, WAL and\n"+
		"PostgreSQL CPU; the producer process used %.3f ms CPU per event\n", float64(r.producerCPU.Microseconds())/1000/float64(max(r.events, 1)))
	h.costText(&b, r)
	b.WriteString(passText(verdict, "p95 "+ms(r.p95)+" <= "+ms(budget)))
	return b.String()
}

func (h *handoff) stagesText(b *strings.Builder, r *result) {
	ms := harness.MS
	fmt.Fprintf(b, "\nwhere the time went (delivery rows and River's job timestamps; each stage's quantiles on their own):\n")
	if r.stagesErr != nil {
		fmt.Fprintf(b, "not read: %v\n", r.stagesErr)
		return
	}
	fmt.Fprintf(b, "%-30s %8s %8s %8s %8s\n", "stage", "n", "p50", "p95", "p99")
	for _, st := range r.stages {
		fmt.Fprintf(b, "%-30s %8d %8s %8s %8s\n", st.Name, st.N, ms(st.P50), ms(st.P95), ms(st.P99))
	}
	fmt.Fprintf(b, "sent by a sender running already (no job fetched between their round and their send): %d\n", r.sentEarlier)
}

// costText prints the per-delivery figures and, with --statements, the
// statements that took the most time.
func (h *handoff) costText(b *strings.Builder, r *result) {
	b.WriteString("\n")
	r.cost.Print(b)
	fmt.Fprintf(b, "worker pool round trips: %s; %d requests, %d duplicates, %d out of order, %d bad signatures, %d missing, %d unexpected\n",
		r.tripKinds, r.requests, r.duplicates, r.outOfOrder, r.badSig, r.missing, r.unexpected)
	cost.PrintTop(b, r.statements)
}

func passText(verdict, pass string) string {
	switch {
	case verdict != "":
		return "FAIL: " + verdict + "\n"
	case pass != "":
		return "PASS: " + pass + "\n"
	}
	return "PASS: every delivery arrived once, in order where ordered, signed\n"
}

func maxBatchText(n int) string {
	if n == 0 {
		return "as configured (unset)"
	}
	return fmt.Sprint(n)
}
