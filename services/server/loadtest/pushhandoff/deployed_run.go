package pushhandoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bothy/bothy/services/server/loadtest/cost"
	"github.com/bothy/bothy/services/server/loadtest/deploy"
	shared "github.com/bothy/bothy/services/server/loadtest/harness"
)

// deployResult is what a deployment-mode run showed.
type deployResult struct {
	producer    *deploy.ProducerResult
	producerCPU time.Duration
	counts      messageCounts
	latency     *deploy.Latencies
	cost        deploy.PhaseCost
	coldStart   time.Duration
	// transactions, statements and riverJobs are the database's over the
	// whole window, the processes' start and stop included; statements is
	// nil without pg_stat_statements.
	transactions, riverJobs int64
	statements              *int64
	top                     []cost.Statement
	stages                  []shared.Stage
	stagesErr               error
	// badMessages are the requests that failed VAPID or decryption.
	badMessages []string

	loadBefore, loadAfter string
}

// measure opens the meter's window, starts the api, measures the workers'
// cold start with a probe event, warms up for a second, then appends at
// --rate for --duration and waits for every message.
func (r *deployed) measure(ctx context.Context) (*deployResult, error) {
	o := r.opts
	meter, others, closeDB, err := r.costs(ctx)
	if err != nil {
		return nil, err
	}
	defer closeDB()
	if err := r.d.StartAPI(ctx); err != nil {
		return nil, err
	}
	res := &deployResult{}
	if res.coldStart, err = r.probe(ctx); err != nil {
		return nil, fmt.Errorf("probe event: %w", err)
	}
	r.d.Describe(r.producerParams(o.rate, o.eventsPerRequest, o.duration))
	if _, _, err := r.phase(ctx, r.producerParams(min(o.rate, 200), o.eventsPerRequest, time.Second), 30*time.Second); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	res.loadBefore = shared.LoadAvg()
	before, err := r.d.BeginPhase(ctx, others)
	if err != nil {
		return nil, err
	}
	stopRecording, err := r.d.Record(ctx, o.perfRecord)
	if err != nil {
		return nil, err
	}
	sent, cpu, err := r.phase(ctx, r.producerParams(o.rate, o.eventsPerRequest, o.duration), o.drain)
	stopRecording()
	if sent == nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if err != nil {
		fmt.Fprintf(r.stdout, "load: %v\n", err) // what did not arrive counts as missing
	}
	if res.cost, err = r.d.EndPhase(ctx, others, before); err != nil {
		return nil, err
	}
	if err := meter.Mark(ctx); err != nil {
		return nil, err
	}
	res.loadAfter = shared.LoadAvg()
	res.producer, res.producerCPU = sent, cpu
	return res, r.finish(ctx, meter, others, res)
}

// finish stops the processes and the receiver, closes the meter's window
// and takes the counts, the latencies and where the time went.
func (r *deployed) finish(ctx context.Context, meter *cost.Meter, others *deploy.Others, res *deployResult) error {
	r.d.Stop()
	totals, err := meter.Finish(ctx)
	if err != nil {
		return fmt.Errorf("measure: %w", err)
	}
	res.transactions, res.statements, res.riverJobs = totals.Transactions, totals.Statements, totals.RiverJobs
	if r.opts.statements && others.DB.Statements {
		if res.top, err = others.DB.TopStatements(ctx, 40); err != nil {
			return err
		}
	}
	res.badMessages = r.stopReceiver()
	res.counts = r.count(res.producer.Sent)
	res.latency = deploy.NewLatencies(res.producer.Sent, r.arrivalTimes)
	if err := r.scratch.Connect(ctx); err != nil {
		return err
	}
	seqs := make([]int64, len(res.producer.Sent))
	for i, s := range res.producer.Sent {
		seqs[i] = s.Seq
	}
	res.stages, res.stagesErr = readStages(ctx, r.scratch.Pool, stagesBySeqSQL, seqs)
	return nil
}

// probe appends one event while no worker runs, starts the workers and
// returns their cold start: from the first worker's start to the event's
// first message.
func (r *deployed) probe(ctx context.Context) (time.Duration, error) {
	res, _, err := deploy.Produce(ctx, r.producerParams(1, 1, time.Second))
	if err == nil && len(res.Sent) != 1 {
		err = fmt.Errorf("%v (%s)", res.Failed, res.FirstError)
	}
	if err != nil {
		return 0, err
	}
	if err := r.d.StartWorkers(ctx); err != nil {
		return 0, err
	}
	if err := r.await(ctx, res.Sent, time.Minute); err != nil {
		return 0, err
	}
	at := r.arrivalTimes(res.Sent[0])
	if len(at) == 0 {
		return 0, errors.New("no message of the probe arrived at its space's devices")
	}
	return slices.MinFunc(at, time.Time.Compare).Sub(r.d.Workers[0].Started), nil
}

// producerParams is one phase of the HTTP producers at rate for dur, each
// request with events events, to the spaces in turn.
func (r *deployed) producerParams(rate float64, events int, dur time.Duration) *deploy.ProducerParams {
	targets := make([][2]string, len(r.spaces))
	for i, s := range r.spaces {
		targets[i] = [2]string{s, "item.updated"}
	}
	return &deploy.ProducerParams{API: r.d.APIURL(), Token: r.token, Rate: rate, Duration: dur,
		Connections: r.opts.connections, EventsPerRequest: events, Targets: targets}
}

// phase runs the producers for one phase and waits, at most within after
// they ended, until the messages of what they appended arrived. It returns
// a nil result only when the producers could not run.
func (r *deployed) phase(ctx context.Context, p *deploy.ProducerParams, within time.Duration) (*deploy.ProducerResult, time.Duration, error) {
	res, cpu, err := deploy.Produce(ctx, p)
	if err != nil {
		return nil, 0, err
	}
	if len(res.Sent) == 0 {
		return nil, 0, fmt.Errorf("no event was acknowledged: %v (%s)", res.Failed, res.FirstError)
	}
	return res, cpu, r.await(ctx, res.Sent, within)
}

// await waits, at most within, until every event of sent has as many
// messages as its space has devices, or a bothy process ends.
func (r *deployed) await(ctx context.Context, sent []deploy.Sent, within time.Duration) error {
	err := shared.Await(ctx, within, r.d.Watch(), func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		missing := 0
		for _, s := range sent {
			missing += max(0, r.opts.fanout-len(r.arrivals[s.Seq]))
		}
		return missing
	})
	if err != nil {
		return fmt.Errorf("messages of %d events: %w", len(sent), err)
	}
	return nil
}

// stopReceiver stops the receiver process once and returns the requests
// that failed VAPID or decryption.
func (r *deployed) stopReceiver() []string {
	if r.rcv == nil {
		return nil
	}
	errs := r.rcv.stop()
	r.rcv = nil
	return errs
}

// messageCounts are the messages of a phase's events: each event is
// expected once at every device of its space.
type messageCounts struct {
	expected, messages int
	// missing are expected messages that did not arrive; duplicates
	// messages that arrived at a device again; unexpected messages at a
	// device not of the event's space.
	missing, duplicates, unexpected int
}

func (r *deployed) count(sent []deploy.Sent) messageCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	var c messageCounts
	for _, s := range sent {
		space := r.spaces[s.Target]
		c.expected += r.opts.fanout
		seen := map[string]bool{}
		for _, a := range r.arrivals[s.Seq] {
			switch {
			case seen[a.device]:
				c.duplicates++
			case r.spaceOf[a.device] != space:
				c.unexpected++
			default:
				c.messages++
			}
			seen[a.device] = true
		}
	}
	c.missing = c.expected - c.messages
	return c
}

// arrivalTimes are when s's event reached each device of its space, the
// first message at each.
func (r *deployed) arrivalTimes(s deploy.Sent) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	space := r.spaces[s.Target]
	seen := map[string]bool{}
	var out []time.Time
	for _, a := range r.arrivals[s.Seq] {
		if !seen[a.device] && r.spaceOf[a.device] == space {
			out = append(out, a.at)
		}
		seen[a.device] = true
	}
	return out
}
