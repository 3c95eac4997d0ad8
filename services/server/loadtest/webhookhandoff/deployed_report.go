package webhookhandoff

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/bothy/bothy/services/server/loadtest/cost"
	"github.com/bothy/bothy/services/server/loadtest/deploy"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// deployResult is what a deployment-mode run showed.
type deployResult struct {
	// events is what the measured phase appended; deliveries what
	// arrived of them.
	events, deliveries int
	expected, missing  int
	duplicates         int
	outOfOrder, badSig int
	unexpected         int
	requests           int

	cost        deploy.PhaseCost
	producer    *deploy.ProducerResult
	producerCPU time.Duration
	// transactions, statements and riverJobs are the database's over the
	// whole window, the processes' start and stop included.
	transactions, riverJobs int64
	statements              *int64
	top                     []cost.Statement

	latency        *deploy.Latencies
	coldStart      time.Duration
	backlogSeconds float64
	// stages say where the time went (see result.stages).
	stages      []harness.Stage
	stagesErr   error
	sentEarlier int

	loadBefore, loadAfter string
}

func (r *deployResult) fromStats(s *receiverStats) {
	if s == nil {
		return
	}
	r.expected, r.missing, r.deliveries = s.Expected+s.Missing, s.Missing, s.Expected
	r.duplicates, r.outOfOrder, r.badSig, r.unexpected, r.requests = s.Duplicates, s.OrderViolations, s.BadSignatures, s.Unexpected, s.Requests
}

// latencies takes each delivery's latency from its request's send and
// from its 201.
func (r *deployResult) latencies(h *handoff, res *deploy.ProducerResult, arrivals map[seqDelivery]time.Time) {
	r.events = len(res.Sent)
	r.latency = deploy.NewLatencies(res.Sent, func(s deploy.Sent) []time.Time {
		var out []time.Time
		for _, k := range h.targets[s.Target].subs {
			if at, ok := arrivals[seqDelivery{sub: k, seq: s.Seq}]; ok {
				out = append(out, at)
			}
		}
		return out
	})
}

// deployJSON is the --json line of a deployment-mode run.
type deployJSON struct {
	Mode             string  `json:"mode"`
	Destination      string  `json:"destination"`
	Deployment       string  `json:"deployment"`
	Binary           string  `json:"binary"`
	Workers          int     `json:"workers"`
	Connections      int     `json:"connections"`
	EventsPerRequest int     `json:"events_per_request"`
	Rate             float64 `json:"rate,omitempty"`
	Backlog          int     `json:"backlog,omitempty"`
	Subscriptions    int     `json:"subscriptions"`
	Unordered        int     `json:"unordered"`
	Spaces           int     `json:"spaces"`
	Fanout           int     `json:"fanout"`
	MaxBatch         int     `json:"max_batch,omitempty"`
	Filter           string  `json:"filter,omitempty"`

	Events            int               `json:"events"`
	Deliveries        int               `json:"deliveries"`
	Seconds           float64           `json:"seconds"`
	EventsAckedPerS   float64           `json:"events_acknowledged_per_s,omitempty"`
	DeliveriesPerS    float64           `json:"deliveries_per_s"`
	ProducerFailures  int               `json:"producer_failures"`
	Missing           int               `json:"missing"`
	Duplicates        int               `json:"duplicates"`
	OrderViolations   int               `json:"order_violations"`
	BadSignatures     int               `json:"bad_signatures"`
	Unexpected        int               `json:"unexpected"`
	Requests          int               `json:"requests"`
	WorkerColdStartS  float64           `json:"worker_cold_start_s"`
	BacklogAppendedS  float64           `json:"backlog_appended_s,omitempty"`
	LatencyFromSendMS *deploy.Quantiles `json:"latency_from_send_ms,omitempty"`
	LatencyFromAckMS  *deploy.Quantiles `json:"latency_from_ack_ms,omitempty"`

	APICPUmsPerEvent         float64            `json:"api_cpu_ms_per_event"`
	WorkerCPUmsPerDelivery   float64            `json:"worker_cpu_ms_per_delivery"`
	PostgresCPUmsPerEvent    float64            `json:"postgres_cpu_ms_per_event"`
	PostgresCPUmsPerEventBy  map[string]float64 `json:"postgres_cpu_ms_per_event_by"`
	ReceiverCPUmsPerDelivery float64            `json:"receiver_cpu_ms_per_delivery"`
	ProducerCPUmsPerEvent    float64            `json:"producer_cpu_ms_per_event,omitempty"`
	AllInCPUmsPerEvent       float64            `json:"all_in_cpu_ms_per_event"`
	TransactionsPerDelivery  float64            `json:"transactions_per_delivery"`
	StatementsPerDelivery    *float64           `json:"statements_per_delivery,omitempty"`
	APIRoundTripsPerEvent    *float64           `json:"api_round_trips_per_event,omitempty"`
	WorkerRoundTripsPerDeliv *float64           `json:"worker_round_trips_per_delivery,omitempty"`
	WALBytesPerEvent         float64            `json:"wal_bytes_per_event"`
	RiverJobsPerDelivery     float64            `json:"river_jobs_per_delivery"`
	LoadBefore               string             `json:"load_before"`
	LoadAfter                string             `json:"load_after"`
}

func (h *handoff) deployJSON(r *deployResult, d string) deployJSON {
	o, c := h.opts, r.cost
	events, deliveries := max(r.events, 1), max(r.deliveries, 1)
	j := deployJSON{Mode: "handoff", Destination: o.destination, Deployment: "processes: 1 api, " + fmt.Sprint(o.workers) + " worker(s); producers over HTTP",
		Binary: d, Workers: o.workers, Connections: o.connections, EventsPerRequest: o.eventsPerRequest,
		Subscriptions: o.subscriptions, Unordered: o.unordered, Spaces: o.spaces, Fanout: o.fanout, MaxBatch: o.maxBatch, Filter: o.filter,
		Events: r.events, Deliveries: r.deliveries, Seconds: math.Round(c.Seconds*1000) / 1000,
		DeliveriesPerS: math.Round(float64(r.deliveries)/max(c.Seconds, 1e-9)*10) / 10,
		Missing:        r.missing, Duplicates: r.duplicates, OrderViolations: r.outOfOrder, BadSignatures: r.badSig,
		Unexpected: r.unexpected, Requests: r.requests, WorkerColdStartS: math.Round(r.coldStart.Seconds()*1000) / 1000,
		APICPUmsPerEvent: deploy.PerMS(c.API, events), WorkerCPUmsPerDelivery: deploy.PerMS(c.Workers, deliveries),
		PostgresCPUmsPerEvent: deploy.PerMS(c.Postgres, events), PostgresCPUmsPerEventBy: map[string]float64{},
		ReceiverCPUmsPerDelivery: deploy.PerMS(c.Receiver, deliveries), AllInCPUmsPerEvent: deploy.PerMS(c.API+c.Workers+c.Postgres, events),
		TransactionsPerDelivery: deploy.Per(r.transactions, deliveries), WALBytesPerEvent: deploy.Per(c.WAL, events),
		RiverJobsPerDelivery: deploy.Per(r.riverJobs, deliveries), LoadBefore: r.loadBefore, LoadAfter: r.loadAfter}
	if r.latency != nil {
		j.LatencyFromSendMS, j.LatencyFromAckMS = deploy.QuantilesOf(r.latency.FromSend), deploy.QuantilesOf(r.latency.FromAck)
	}
	for class, t := range c.PostgresBy {
		j.PostgresCPUmsPerEventBy[class] = deploy.PerMS(t, events)
	}
	if r.statements != nil {
		j.StatementsPerDelivery = new(deploy.Per(*r.statements, deliveries))
	}
	j.APIRoundTripsPerEvent, j.WorkerRoundTripsPerDeliv = c.RoundTripsPer(events, deliveries)
	if o.backlog > 0 {
		j.Mode, j.Backlog, j.BacklogAppendedS = "backlog", o.backlog, math.Round(r.backlogSeconds*10)/10
		return j
	}
	j.Rate = o.Rate
	j.ProducerCPUmsPerEvent = deploy.PerMS(r.producerCPU, events)
	if r.producer != nil {
		j.EventsAckedPerS = math.Round(float64(len(r.producer.Sent))/max(r.producer.Seconds, 1e-9)*10) / 10
		for _, n := range r.producer.Failed {
			j.ProducerFailures += n
		}
	}
	return j
}

// reportDeployed prints the summary and the JSON line, and returns the
// verdict.
func (h *handoff) reportDeployed(r *deployResult, d *deployment) error {
	j := h.deployJSON(r, d.Bin.Version)
	budget := h.scratch.Cfg.Perf.WebhookHandoffP95
	if j.Mode == "backlog" {
		budget = 0
	}
	var b strings.Builder
	h.deployedText(&b, r, &j)
	verdict, onlyP95 := deployVerdict(&j, budget)
	b.WriteString(passText(verdict, ""))
	fmt.Fprint(h.stdout, b.String())
	if h.opts.json {
		line, err := json.Marshal(j)
		if err != nil {
			return err
		}
		fmt.Fprintf(h.stdout, "%s\n", line)
	}
	return verdictErr(verdict, onlyP95)
}

func (h *handoff) deployedText(b *strings.Builder, r *deployResult, j *deployJSON) {
	o := h.opts
	fmt.Fprintf(b, "\nwebhook_handoff (%s): %d subscriptions (%d unordered) on %d spaces, fanout %d\n", j.Mode, o.subscriptions, o.unordered, o.spaces, o.fanout)
	h.header(b)
	if h.broker != nil {
		fmt.Fprintf(b, "destination %s, the run's own %s: subscription 0 publishes to %s, and so on; the receiver consumes them all\n",
			h.broker.Kind, h.broker.Name, h.broker.address(0))
	}
	fmt.Fprintf(b, "load average before %s, after %s; worker cold start (start -> first delivery) %.3fs\n", r.loadBefore, r.loadAfter, j.WorkerColdStartS)
	if j.Mode == "handoff" {
		fmt.Fprintf(b, "offered %.0f events/s for %s: %d acknowledged (%.1f/s), %d requests failed %v\n",
			o.Rate, o.Duration, r.events, j.EventsAckedPerS, j.ProducerFailures, r.producer.Failed)
		j.LatencyFromSendMS.Print(b, "from the client's send")
		j.LatencyFromAckMS.Print(b, "from the 201")
		if r.latency != nil {
			r.latency.PrintBuckets(b, "deliveries")
		}
	}
	if j.Mode == "handoff" {
		h.stagesText(b, &result{stages: r.stages, stagesErr: r.stagesErr, sentEarlier: r.sentEarlier})
	}
	fmt.Fprintf(b, "%d deliveries in %.1fs (%.1f/s); missing %d, duplicates %d, out of order %d, bad signatures %d, unexpected %d\n",
		r.deliveries, j.Seconds, j.DeliveriesPerS, r.missing, r.duplicates, r.outOfOrder, r.badSig, r.unexpected)
	fmt.Fprintf(b, "CPU ms: api %.4f/event, worker %.4f/delivery, PostgreSQL %.4f/event %v, receiver %.4f/delivery; all-in (api+worker+PostgreSQL) %.4f/event\n",
		j.APICPUmsPerEvent, j.WorkerCPUmsPerDelivery, j.PostgresCPUmsPerEvent, j.PostgresCPUmsPerEventBy, j.ReceiverCPUmsPerDelivery, j.AllInCPUmsPerEvent)
	fmt.Fprintf(b, "per delivery: %.3f transactions, %s statements, %.4f River jobs (processes' start and stop included); %.0f WAL bytes per event\n",
		j.TransactionsPerDelivery, orNA(j.StatementsPerDelivery, "%.2f"), j.RiverJobsPerDelivery, j.WALBytesPerEvent)
	fmt.Fprintf(b, "round trips to PostgreSQL (bothy_database_round_trips_total): api %s/event, worker %s/delivery\n",
		orNA(j.APIRoundTripsPerEvent, "%.3f"), orNA(j.WorkerRoundTripsPerDeliv, "%.3f"))
	cost.PrintTop(b, r.top)
}

// deployVerdict says why the run fails, or "": any delivery missing,
// repeated, out of order or badly signed, or a p95 from the 201 over
// budget (0: none), and whether the p95 was the only reason.
func deployVerdict(j *deployJSON, budget time.Duration) (string, bool) {
	var why []string
	if j.Deliveries == 0 {
		why = append(why, "no delivery arrived")
	}
	slow := budget > 0 && j.LatencyFromAckMS != nil && j.LatencyFromAckMS.P95 > deploy.Millis(budget)
	if slow {
		why = append(why, fmt.Sprintf("p95 from the 201 %.1f ms above perf.webhook_handoff_p95 %s", j.LatencyFromAckMS.P95, harness.MS(budget)))
	}
	for _, c := range []struct {
		n    int
		what string
	}{
		{j.Missing, "deliveries missing"}, {j.Duplicates, "deliveries received twice"},
		{j.OrderViolations, "deliveries out of order on ordered subscriptions"}, {j.BadSignatures, "requests failed their signature"},
		{j.Unexpected, "deliveries of events the subscription does not filter"},
	} {
		if c.n > 0 {
			why = append(why, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return strings.Join(why, "; "), slow && len(why) == 1
}

func orNA(v *float64, format string) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf(format, *v)
}
