package pushhandoff

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
	"github.com/bothy/bothy/services/server/loadtest/deploy"
	shared "github.com/bothy/bothy/services/server/loadtest/harness"
)

// deployJSON is the --json line of a deployment-mode run. Its fields
// parallel webhook_handoff's, with a message (an event at a device) where
// that has a delivery.
type deployJSON struct {
	Mode             string  `json:"mode"`
	Deployment       string  `json:"deployment"`
	Binary           string  `json:"binary"`
	Workers          int     `json:"workers"`
	Connections      int     `json:"connections"`
	EventsPerRequest int     `json:"events_per_request"`
	Rate             float64 `json:"rate"`
	Devices          int     `json:"devices"`
	Spaces           int     `json:"spaces"`
	Fanout           int     `json:"fanout"`

	Events            int               `json:"events"`
	Messages          int               `json:"messages"`
	Seconds           float64           `json:"seconds"`
	EventsAckedPerS   float64           `json:"events_acknowledged_per_s"`
	MessagesPerS      float64           `json:"messages_per_s"`
	ProducerFailures  int               `json:"producer_failures"`
	Missing           int               `json:"missing"`
	Duplicates        int               `json:"duplicates"`
	BadMessages       int               `json:"bad_messages"`
	Unexpected        int               `json:"unexpected"`
	WorkerColdStartS  float64           `json:"worker_cold_start_s"`
	LatencyFromSendMS *deploy.Quantiles `json:"latency_from_send_ms,omitempty"`
	LatencyFromAckMS  *deploy.Quantiles `json:"latency_from_ack_ms,omitempty"`

	APICPUmsPerEvent        float64            `json:"api_cpu_ms_per_event"`
	WorkerCPUmsPerMessage   float64            `json:"worker_cpu_ms_per_message"`
	PostgresCPUmsPerEvent   float64            `json:"postgres_cpu_ms_per_event"`
	PostgresCPUmsPerEventBy map[string]float64 `json:"postgres_cpu_ms_per_event_by"`
	ReceiverCPUmsPerMessage float64            `json:"receiver_cpu_ms_per_message"`
	ProducerCPUmsPerEvent   float64            `json:"producer_cpu_ms_per_event"`
	AllInCPUmsPerEvent      float64            `json:"all_in_cpu_ms_per_event"`
	TransactionsPerMessage  float64            `json:"transactions_per_message"`
	StatementsPerMessage    *float64           `json:"statements_per_message,omitempty"`
	APIRoundTripsPerEvent   *float64           `json:"api_round_trips_per_event,omitempty"`
	WorkerRoundTripsPerMsg  *float64           `json:"worker_round_trips_per_message,omitempty"`
	WALBytesPerEvent        float64            `json:"wal_bytes_per_event"`
	RiverJobsPerMessage     float64            `json:"river_jobs_per_message"`
	LoadBefore              string             `json:"load_before"`
	LoadAfter               string             `json:"load_after"`
}

func (r *deployed) deployJSON(res *deployResult) deployJSON {
	o, c, n := r.opts, res.cost, res.counts
	events, messages := max(len(res.producer.Sent), 1), max(n.messages, 1)
	j := deployJSON{Mode: "handoff", Deployment: fmt.Sprintf("processes: 1 api, %d worker(s); producers over HTTP", o.workers),
		Binary: r.d.Bin.Version, Workers: o.workers, Connections: o.connections, EventsPerRequest: o.eventsPerRequest, Rate: o.rate,
		Devices: len(r.spaceOf), Spaces: len(r.spaces), Fanout: o.fanout,
		Events: len(res.producer.Sent), Messages: n.messages, Seconds: math.Round(c.Seconds*1000) / 1000,
		EventsAckedPerS: math.Round(float64(len(res.producer.Sent))/max(res.producer.Seconds, 1e-9)*10) / 10,
		MessagesPerS:    math.Round(float64(n.messages)/max(c.Seconds, 1e-9)*10) / 10,
		Missing:         n.missing, Duplicates: n.duplicates, BadMessages: len(res.badMessages), Unexpected: n.unexpected,
		WorkerColdStartS:  math.Round(res.coldStart.Seconds()*1000) / 1000,
		LatencyFromSendMS: deploy.QuantilesOf(res.latency.FromSend), LatencyFromAckMS: deploy.QuantilesOf(res.latency.FromAck),
		APICPUmsPerEvent: deploy.PerMS(c.API, events), WorkerCPUmsPerMessage: deploy.PerMS(c.Workers, messages),
		PostgresCPUmsPerEvent: deploy.PerMS(c.Postgres, events), PostgresCPUmsPerEventBy: map[string]float64{},
		ReceiverCPUmsPerMessage: deploy.PerMS(c.Receiver, messages), ProducerCPUmsPerEvent: deploy.PerMS(res.producerCPU, events),
		AllInCPUmsPerEvent:     deploy.PerMS(c.API+c.Workers+c.Postgres, events),
		TransactionsPerMessage: deploy.Per(res.transactions, messages), WALBytesPerEvent: deploy.Per(c.WAL, events),
		RiverJobsPerMessage: deploy.Per(res.riverJobs, messages), LoadBefore: res.loadBefore, LoadAfter: res.loadAfter}
	for class, t := range c.PostgresBy {
		j.PostgresCPUmsPerEventBy[class] = deploy.PerMS(t, events)
	}
	if res.statements != nil {
		j.StatementsPerMessage = new(deploy.Per(*res.statements, messages))
	}
	j.APIRoundTripsPerEvent, j.WorkerRoundTripsPerMsg = c.RoundTripsPer(events, messages)
	for _, k := range res.producer.Failed {
		j.ProducerFailures += k
	}
	return j
}

// report prints the summary and the JSON line, writes the summary and the
// histograms into --out, and returns the verdict.
func (r *deployed) report(res *deployResult) error {
	j := r.deployJSON(res)
	verdict, onlyP95 := deployVerdict(&j, r.budget)
	var b strings.Builder
	r.summary(&b, res, &j)
	if verdict == "" {
		fmt.Fprintf(&b, "PASS: p95 from the 201 %.1f ms <= %s; every message arrived once and decrypted\n", j.LatencyFromAckMS.P95, ms(r.budget))
	} else {
		fmt.Fprintf(&b, "FAIL: %s\n", verdict)
	}
	fmt.Fprint(r.stdout, b.String())
	if err := r.writeFiles(b.String(), res); err != nil {
		return err
	}
	if r.opts.json {
		line, err := json.Marshal(j)
		if err != nil {
			return err
		}
		fmt.Fprintf(r.stdout, "%s\n", line)
	}
	switch {
	case onlyP95:
		return fmt.Errorf("%w: %s", ErrP95OverBudget, verdict)
	case verdict != "":
		return fmt.Errorf("%w: %s", ErrOverBudget, verdict)
	}
	return nil
}

func (r *deployed) summary(b *strings.Builder, res *deployResult, j *deployJSON) {
	o := r.opts
	fmt.Fprintf(b, "\npush_handoff (deployment): event POSTed -> decrypted push message; %d devices on %d spaces, fanout %d\n", j.Devices, j.Spaces, o.fanout)
	fmt.Fprintf(b, "date %s, %s, %d CPUs, on a private PostgreSQL cluster\n", time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.NumCPU())
	fmt.Fprintf(b, "load average before %s, after %s; worker cold start (start -> first message) %.3fs\n", res.loadBefore, res.loadAfter, j.WorkerColdStartS)
	fmt.Fprintf(b, "offered %.0f events/s for %s: %d acknowledged (%.1f/s), %d requests failed %v\n",
		o.rate, o.duration, j.Events, j.EventsAckedPerS, j.ProducerFailures, res.producer.Failed)
	j.LatencyFromSendMS.Print(b, "from the client's send")
	j.LatencyFromAckMS.Print(b, "from the 201")
	res.latency.PrintBuckets(b, "messages")
	fmt.Fprintf(b, "where the time went (River's job timestamps; the rest is fetch -> worker -> push service -> decrypted):\n")
	if res.stagesErr != nil {
		fmt.Fprintf(b, "  not read: %v\n", res.stagesErr)
	}
	for _, st := range res.stages {
		fmt.Fprintf(b, "  %-28s %8d p50 %s p95 %s p99 %s\n", st.Name, st.N, ms(st.P50), ms(st.P95), ms(st.P99))
	}
	fmt.Fprintf(b, "%d messages of %d expected in %.1fs (%.1f/s); missing %d, duplicates %d, unexpected %d, bad (failed VAPID or decryption) %d\n",
		j.Messages, res.counts.expected, j.Seconds, j.MessagesPerS, j.Missing, j.Duplicates, j.Unexpected, j.BadMessages)
	for i, e := range res.badMessages {
		if i == 5 {
			break
		}
		fmt.Fprintf(b, "  %s\n", e)
	}
	fmt.Fprintf(b, "CPU ms: api %.4f/event, worker %.4f/message, PostgreSQL %.4f/event %v, receiver %.4f/message, producers %.4f/event; all-in (api+worker+PostgreSQL) %.4f/event\n",
		j.APICPUmsPerEvent, j.WorkerCPUmsPerMessage, j.PostgresCPUmsPerEvent, j.PostgresCPUmsPerEventBy, j.ReceiverCPUmsPerMessage,
		j.ProducerCPUmsPerEvent, j.AllInCPUmsPerEvent)
	statements := "n/a"
	if j.StatementsPerMessage != nil {
		statements = fmt.Sprintf("%.2f", *j.StatementsPerMessage)
	}
	fmt.Fprintf(b, "per message: %.3f transactions, %s statements, %.4f River jobs (processes' start and stop included); %.0f WAL bytes per event\n",
		j.TransactionsPerMessage, statements, j.RiverJobsPerMessage, j.WALBytesPerEvent)
	if j.APIRoundTripsPerEvent != nil {
		fmt.Fprintf(b, "round trips to PostgreSQL (bothy_database_round_trips_total): api %.3f/event, worker %.3f/message\n",
			*j.APIRoundTripsPerEvent, *j.WorkerRoundTripsPerMsg)
	}
	fmt.Fprintf(b, "budget perf.push_handoff_p95 = %s, judged on the p95 from the 201\n", ms(r.budget))
	cost.PrintTop(b, res.top)
}

// deployVerdict says why the run fails, or "", and whether the p95 was
// the only reason: no message, a p95 from the 201 over budget, or any
// message missing, repeated, unexpected or failing VAPID or decryption.
func deployVerdict(j *deployJSON, budget time.Duration) (string, bool) {
	var why []string
	if j.Messages == 0 {
		why = append(why, "no message arrived")
	}
	slow := j.LatencyFromAckMS != nil && j.LatencyFromAckMS.P95 > deploy.Millis(budget)
	if slow {
		why = append(why, fmt.Sprintf("p95 from the 201 %.1f ms above perf.push_handoff_p95 %s", j.LatencyFromAckMS.P95, ms(budget)))
	}
	for _, c := range []struct {
		n    int
		what string
	}{
		{j.Missing, "messages missing"}, {j.Duplicates, "messages received twice"},
		{j.Unexpected, "messages at devices not of the event's space"}, {j.BadMessages, "messages failed VAPID or decryption"},
	} {
		if c.n > 0 {
			why = append(why, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return strings.Join(why, "; "), slow && len(why) == 1
}

// writeFiles writes the summary to push_handoff.txt and the histograms of
// the latency from the send and from the 201 to push_handoff.png in --out.
func (r *deployed) writeFiles(summary string, res *deployResult) error {
	out := r.opts.out
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	txt, png := filepath.Join(out, "push_handoff.txt"), filepath.Join(out, "push_handoff.png")
	if err := os.WriteFile(txt, []byte(summary), 0o644); err != nil {
		return err
	}
	var panels []shared.Panel
	for _, p := range []struct {
		what string
		l    []time.Duration
	}{{"the client's send", res.latency.FromSend}, {"the 201", res.latency.FromAck}} {
		panels = append(panels, shared.Panel{Title: fmt.Sprintf("deployment: %d messages, %d missing", len(p.l), res.counts.missing),
			Axis: "ms from " + p.what + " to the decrypted message", Latencies: p.l, P50: shared.Quantile(p.l, .5),
			P95: shared.Quantile(p.l, .95), P99: shared.Quantile(p.l, .99), Max: shared.Quantile(p.l, 1)})
	}
	if err := shared.WriteHistogram(png, panels, r.budget); err != nil {
		return fmt.Errorf("histogram: %w", err)
	}
	fmt.Fprintf(r.stdout, "wrote %s and %s\n", txt, png)
	return nil
}
