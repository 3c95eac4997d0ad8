package webhookhandoff

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bothy/bothy/services/server/loadtest/deploy"
	"github.com/bothy/bothy/services/server/loadtest/harness"
)

// runDeployed measures the deployment: the api process, then a probe
// event, then the worker processes (their cold start is the probe's
// delivery), then either the hand-off at --rate or, with --backlog, the
// drain of a backlog appended over HTTP while no worker ran.
func (h *handoff) runDeployed(ctx context.Context) (err error) {
	d, err := h.prepareDeployment(ctx)
	if err != nil {
		return err
	}
	defer func() { d.Close(ctx, h.opts.Keep || (err != nil && !errors.Is(err, ErrOverBudget))) }()
	c, err := h.startCosts(ctx)
	if err != nil {
		return err
	}
	defer c.close(ctx)
	if err := d.StartAPI(ctx); err != nil {
		return err
	}
	r := &deployResult{}
	if h.opts.backlog > 0 {
		err = h.runDrain(ctx, d, c, r)
	} else {
		err = h.runLive(ctx, d, c, r)
	}
	if err != nil {
		return err
	}
	d.Stop()
	totals, err := c.meter.Finish(ctx)
	if err != nil {
		return fmt.Errorf("measure: %w", err)
	}
	r.transactions, r.statements, r.riverJobs = totals.Transactions, totals.Statements, totals.RiverJobs
	if r.top, err = h.topStatements(ctx, c); err != nil {
		return err
	}
	return h.reportDeployed(r, d)
}

// runLive posts one probe event, starts the workers (their cold start is
// the probe's delivery), then measures the hand-off.
func (h *handoff) runLive(ctx context.Context, d *deployment, c *costs, r *deployResult) error {
	res, _, err := deploy.Produce(ctx, h.producerParams(d, 1, 1, time.Second))
	if err == nil && len(res.Sent) != 1 {
		err = fmt.Errorf("%v (%s)", res.Failed, res.FirstError)
	}
	if err != nil {
		return fmt.Errorf("probe event: %w", err)
	}
	if err := h.rcv.expect(ctx, h.expectation(res)); err != nil {
		return err
	}
	if err := d.StartWorkers(ctx); err != nil {
		return err
	}
	stats, err := h.rcv.await(ctx, time.Minute, d.Watch())
	if err != nil {
		return fmt.Errorf("probe delivery: %w", err)
	}
	r.coldStart = stats.LastArrival.Sub(d.Workers[0].Started)
	d.Describe(h.producerParams(d, h.opts.Rate, h.opts.eventsPerRequest, h.opts.Duration))
	return h.measureHandoff(ctx, d, c, r)
}

// runDrain appends the backlog while no worker runs, then starts the
// workers and measures them until it is delivered; their cold start is
// the first delivery.
func (h *handoff) runDrain(ctx context.Context, d *deployment, c *costs, r *deployResult) error {
	want, seconds, err := h.appendBacklog(ctx, d)
	if err != nil {
		return fmt.Errorf("backlog: %w", err)
	}
	r.backlogSeconds = seconds
	if err := h.rcv.expect(ctx, want); err != nil {
		return err
	}
	if err := d.StartWorkers(ctx); err != nil {
		return err
	}
	d.Describe(h.producerParams(d, 0, 100, 0))
	if err := h.measureDrain(ctx, d, c, r, want); err != nil {
		return err
	}
	arrivals, err := h.rcv.arrivalsBySeq(ctx)
	if err != nil {
		return err
	}
	for _, at := range arrivals {
		if first := at.Sub(d.Workers[0].Started); r.coldStart == 0 || first < r.coldStart {
			r.coldStart = first
		}
	}
	return nil
}

// producerParams is one phase of the HTTP producers at rate for dur;
// events is the events per request (the backlog sends 100).
func (h *handoff) producerParams(d *deployment, rate float64, events int, dur time.Duration) *deploy.ProducerParams {
	targets := make([][2]string, len(h.targets))
	for i, t := range h.targets {
		targets[i] = [2]string{t.space, t.typ}
	}
	return &deploy.ProducerParams{API: d.APIURL(), Token: d.token, Rate: rate, Duration: dur,
		Connections: h.opts.connections, EventsPerRequest: events, Targets: targets}
}

// expectation is the deliveries res's events make: each acknowledged
// event at every subscription of its target.
func (h *handoff) expectation(res *deploy.ProducerResult) *expectation {
	want := &expectation{Counts: make([]int, len(h.subs))}
	for i, s := range res.Sent {
		if i == 0 || s.Seq <= want.After {
			want.After = s.Seq - 1
		}
		want.Upto = max(want.Upto, s.Seq)
		for _, k := range h.targets[s.Target].subs {
			want.Counts[k]++
		}
	}
	return want
}

// httpPhase runs the producers for one phase and waits, at most within
// after they ended, until the deliveries of what they appended arrived.
// It returns a nil result only when the producers could not run.
func (h *handoff) httpPhase(ctx context.Context, d *deployment, p *deploy.ProducerParams, within time.Duration) (*deploy.ProducerResult, time.Duration, *receiverStats, error) {
	res, cpu, err := deploy.Produce(ctx, p)
	if err != nil {
		return nil, 0, nil, err
	}
	if len(res.Sent) == 0 {
		return nil, 0, nil, fmt.Errorf("no event was acknowledged: %v (%s)", res.Failed, res.FirstError)
	}
	if err := h.rcv.expect(ctx, h.expectation(res)); err != nil {
		return nil, 0, nil, err
	}
	stats, err := h.rcv.await(ctx, within, d.Watch())
	return res, cpu, stats, err
}

// measureHandoff warms up for a second, then appends at --rate for
// --duration and measures each delivery from its request's send and from
// its 201.
func (h *handoff) measureHandoff(ctx context.Context, d *deployment, c *costs, r *deployResult) error {
	o := h.opts
	if _, _, _, err := h.httpPhase(ctx, d, h.producerParams(d, min(o.Rate, 200), o.eventsPerRequest, time.Second), 30*time.Second); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	r.loadBefore = harness.LoadAvg()
	others, err := h.others(c)
	if err != nil {
		return err
	}
	before, err := d.BeginPhase(ctx, others)
	if err != nil {
		return err
	}
	stopRecording, err := d.Record(ctx, h.opts.perfRecord)
	if err != nil {
		return err
	}
	res, cpu, stats, err := h.httpPhase(ctx, d, h.producerParams(d, o.Rate, o.eventsPerRequest, o.Duration), o.drain)
	stopRecording()
	if res == nil {
		return fmt.Errorf("load: %w", err)
	}
	if err != nil {
		fmt.Fprintf(h.stdout, "load: %v\n", err)
	}
	if r.cost, err = h.phaseEnd(ctx, d, c, others, before); err != nil {
		return err
	}
	r.loadAfter = harness.LoadAvg()
	r.fromStats(stats)
	r.producer, r.producerCPU = res, cpu
	arrivals, err := h.rcv.arrivalsBySeq(ctx)
	if err != nil {
		return err
	}
	r.latencies(h, res, arrivals)
	return h.deployedStages(ctx, r, res)
}

// deployedStages reads where the time went, as the in-process mode does
// (stages), from the delivery rows and River's jobs.
func (h *handoff) deployedStages(ctx context.Context, r *deployResult, res *deploy.ProducerResult) error {
	if err := h.scratch.Connect(ctx); err != nil {
		return err
	}
	defer h.scratch.Disconnect()
	byID, err := h.rcv.arrivals(ctx)
	if err != nil {
		return err
	}
	want := h.expectation(res)
	var st result
	st.stagesErr = h.stages(ctx, &st, &phaseResult{producerResult: producerResult{FirstSeq: want.After + 1, LastSeq: want.Upto}}, byID)
	r.stages, r.stagesErr, r.sentEarlier = st.stages, st.stagesErr, st.sentEarlier
	return nil
}

// phaseEnd is what the phase cost since before, and marks the end of the
// meter's window for time, CPU and WAL.
func (h *handoff) phaseEnd(ctx context.Context, d *deployment, c *costs, others *deploy.Others, before deploy.Usage) (deploy.PhaseCost, error) {
	pc, err := d.EndPhase(ctx, others, before)
	if err != nil {
		return pc, err
	}
	return pc, c.meter.Mark(ctx)
}

// appendBacklog appends --backlog events per target over HTTP, 100 per
// request, while no worker runs.
func (h *handoff) appendBacklog(ctx context.Context, d *deployment) (*expectation, float64, error) {
	per := eventsPerBacklogRequest(h.opts.backlog)
	requests := h.opts.backlog / per * len(h.targets)
	n := requests * per
	// The rate only paces the requests: far above what the api takes, so
	// the producers send as fast as it answers. Requests go to the targets
	// in turn, so each gets --backlog events.
	const rate = 1e4 // requests per second
	p := h.producerParams(d, rate*float64(per), per, time.Duration((float64(requests)+0.5)/rate*float64(time.Second)))
	res, _, err := deploy.Produce(ctx, p)
	if err != nil {
		return nil, 0, err
	}
	if len(res.Sent) != n {
		return nil, 0, fmt.Errorf("%d of %d events acknowledged: %v (%s)", len(res.Sent), n, res.Failed, res.FirstError)
	}
	fmt.Fprintf(h.stdout, "backlog: %d events appended over HTTP in %.1fs (%d per request, %d connections), no worker running\n",
		n, res.Seconds, per, h.opts.connections)
	return h.expectation(res), res.Seconds, nil
}

// eventsPerBacklogRequest is the most events, up to the API's 100, that
// divide a backlog into equal requests.
func eventsPerBacklogRequest(backlog int) int {
	for k := min(100, backlog); k > 1; k-- {
		if backlog%k == 0 {
			return k
		}
	}
	return 1
}

// measureDrain measures the workers from their start until every
// delivery of the backlog arrived.
func (h *handoff) measureDrain(ctx context.Context, d *deployment, c *costs, r *deployResult, want *expectation) error {
	r.loadBefore = harness.LoadAvg()
	others, err := h.others(c)
	if err != nil {
		return err
	}
	before, err := d.BeginPhase(ctx, others)
	if err != nil {
		return err
	}
	// The workers started a moment ago: what they used since counts.
	before.Workers, before.At = 0, d.Workers[0].Started
	stopRecording, err := d.Record(ctx, h.opts.perfRecord)
	if err != nil {
		return err
	}
	stats, err := h.rcv.await(ctx, h.opts.drain, d.Watch())
	stopRecording()
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(h.stdout, "drain: %v\n", err)
	}
	if r.cost, err = h.phaseEnd(ctx, d, c, others, before); err != nil {
		return err
	}
	r.loadAfter = harness.LoadAvg()
	r.fromStats(stats)
	r.events = int(want.Upto - want.After)
	return nil
}
