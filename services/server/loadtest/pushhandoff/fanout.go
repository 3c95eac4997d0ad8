package pushhandoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/loadtest/cost"
	shared "github.com/bothy/bothy/services/server/loadtest/harness"
)

// The fan-out mode writes one event at a time to a space whose every
// member has a device, and measures how long the last device waits for its
// decrypted message, and how much CPU a message costs: this process (the
// worker role and the producer), the PostgreSQL backends serving the
// scratch database, and the receiver, which runs in a process of its own
// so that its decryption is not counted as the worker's.

const fanoutSpace = "space-fanout"

// fanoutEvent is one measured event.
type fanoutEvent struct {
	jobs                  int
	msgs                  int
	first, p50, p95, last time.Duration
	drained               time.Duration // commit to every push.deliver job finished
	self, pg, receiver    time.Duration // CPU during the event
	pgUnknown             bool
	wall                  time.Duration
	lost                  int
	pgVanished            int
}

// fanout runs the fan-out mode and writes push_handoff_fanout.txt.
func (h *harness) fanout(ctx context.Context, stdout io.Writer) error {
	names := deviceNames(h.opts.devices)
	rp, err := startReceiverProc(ctx, h.vapid.Public, names, h.arrivedAt)
	if err != nil {
		return err
	}
	stopped := false
	var decryptErrors []string
	stopReceiver := func() {
		if !stopped {
			stopped = true
			decryptErrors = rp.stop()
		}
	}
	defer stopReceiver()
	if err := h.seedFanout(ctx, names, rp.devices); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	h.spaces = []string{fanoutSpace}
	done, stop, err := h.startFanoutWorker(ctx)
	if err != nil {
		return err
	}
	defer stop()

	start := time.Now()
	if _, err := h.fanoutOne(ctx, 0, rp, done); err != nil { // warm-up
		return fmt.Errorf("event %d: %w", 0, err)
	}
	machine0 := sampleCPU()
	stopProfile, err := startProfile(h.opts.profile)
	if err != nil {
		return err
	}
	defer stopProfile()
	events, err := h.fanoutMeasured(ctx, rp, done)
	if err != nil {
		return err
	}
	machine := cpuSummary(machine0, sampleCPU())
	stop()
	stopReceiver()
	return writeFanout(stdout, h.opts, events, machine, decryptErrors, time.Since(start))
}

// deviceNames names n devices, one per principal.
func deviceNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("user-%05d", i)
	}
	return names
}

// arrivedAt records a message that the receiver process decrypted.
func (h *harness) arrivedAt(a arrival) {
	h.mu.Lock()
	h.arrivals[a.id] = append(h.arrivals[a.id], a.at)
	h.mu.Unlock()
}

// startFanoutWorker starts the worker with the first variant's River
// settings.
func (h *harness) startFanoutWorker(ctx context.Context) (done <-chan error, stop func(), err error) {
	cfg, err := h.config(h.opts.variants[0])
	if err != nil {
		return nil, nil, err
	}
	return h.startWorker(ctx, cfg)
}

// fanoutMeasured writes the measured events one after another, each once
// the one before was delivered.
func (h *harness) fanoutMeasured(ctx context.Context, rp *receiverProc, done <-chan error) ([]fanoutEvent, error) {
	var events []fanoutEvent
	for i := 1; i <= h.opts.events; i++ {
		ev, err := h.fanoutOne(ctx, i, rp, done)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		events = append(events, ev)
	}
	return events, nil
}

// writeFanout prints the summary and writes it into --out; its error says
// how many messages were lost or failed to decrypt.
func writeFanout(stdout io.Writer, o *options, events []fanoutEvent, machine string, decryptErrors []string, wall time.Duration) error {
	sum := fanoutSummary(o, events, machine, decryptErrors, wall)
	fmt.Fprint(stdout, sum)
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(o.out, "push_handoff_fanout.txt")
	if err := os.WriteFile(path, []byte(sum), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", path)
	lost := 0
	for _, ev := range events {
		lost += ev.lost
	}
	if lost > 0 || len(decryptErrors) > 0 {
		return fmt.Errorf("%w: %d messages lost, %d failed VAPID or decryption", ErrOverBudget, lost, len(decryptErrors))
	}
	return nil
}

// seedFanout makes every device's principal a reader of the fan-out space
// and registers the devices the receiver process created.
func (h *harness) seedFanout(ctx context.Context, names []string, keys map[string]deviceKeys) error {
	if err := authz.CreatePrincipal(ctx, h.pool, "perf-writer", authz.KindApp); err != nil {
		return err
	}
	spaceOf := make(map[string]string, len(names))
	for _, n := range names {
		spaceOf[n] = fanoutSpace
	}
	return registerDevices(ctx, h.pool, spaceOf, keys)
}

// registerDevices makes each principal of spaceOf a user with read on its
// space and registers its device, whose keys the receiver process created,
// as the API's registration does (push.Registry).
func registerDevices(ctx context.Context, pool *pgxpool.Pool, spaceOf map[string]string, keys map[string]deviceKeys) error {
	reg := push.NewRegistry(&push.RegistryConfig{AllowPrivateTargets: true})
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for principal, space := range spaceOf {
		g.Go(func() error {
			if err := authz.CreatePrincipal(gctx, pool, principal, authz.KindUser); err != nil {
				return err
			}
			if err := authz.Grant(gctx, pool, &authz.GrantParams{Space: space, Principal: principal, Right: authz.RightRead}); err != nil {
				return err
			}
			k := keys[principal]
			var s push.Subscription
			s.Endpoint, s.Keys.P256dh, s.Keys.Auth = k.endpoint, k.p256dh, k.auth
			_, err := reg.Register(gctx, pool, &push.RegisterParams{Principal: principal, Subscription: s, UserAgent: "push_handoff"})
			return err
		})
	}
	return g.Wait()
}

// unfinishedJobsSQL counts jobs of the push queue not finished for good,
// through River's fetch index, so polling it costs the same however many
// finished jobs the run left behind.
const unfinishedJobsSQL = `
SELECT count(*) FROM river_job
WHERE state IN ('available', 'pending', 'retryable', 'running', 'scheduled') AND queue = 'push'`

// lastJobSQL is the newest job's id; pushJobsSinceSQL counts the push
// jobs made after one, through the primary key.
const (
	lastJobSQL       = `SELECT coalesce(max(id), 0) FROM river_job`
	pushJobsSinceSQL = `SELECT count(*) FROM river_job WHERE id > $1 AND queue = 'push'`
)

// fanoutOne writes one event, waits for all its messages and for the push
// queue to drain, and measures the CPU spent meanwhile.
func (h *harness) fanoutOne(ctx context.Context, i int, rp *receiverProc, done <-chan error) (fanoutEvent, error) {
	var ev fanoutEvent
	jobs0, err := h.queryInt(ctx, lastJobSQL)
	if err != nil {
		return ev, err
	}
	mark := h.markCPU(ctx, rp)
	id, err := h.write(ctx, i)
	if err != nil {
		return ev, err
	}
	if ev.lost, err = h.awaitFanout(ctx, id, done); err != nil {
		return ev, err
	}
	drainedAt := time.Now()
	if err := mark.spent(ctx, h, rp, drainedAt, &ev); err != nil {
		return ev, err
	}
	jobs, err := h.queryInt(ctx, pushJobsSinceSQL, jobs0)
	if err != nil {
		return ev, err
	}
	ev.jobs = int(jobs)
	h.latencies(id, drainedAt, &ev)
	return ev, nil
}

// awaitFanout waits until event id has a message at every device and then
// until every job finished, at most 2 minutes; lost is the messages
// missing then. The database is asked only once all messages are in, so
// the polling costs it nothing meanwhile.
func (h *harness) awaitFanout(ctx context.Context, id uuid.UUID, done <-chan error) (lost int, err error) {
	n := h.opts.devices
	deadline := time.Now().Add(2 * time.Minute)
	for {
		h.mu.Lock()
		got := len(h.arrivals[id])
		h.mu.Unlock()
		if got >= n {
			unfinished, err := h.queryInt(ctx, unfinishedJobsSQL)
			if err != nil {
				return 0, err
			}
			if unfinished == 0 {
				return 0, nil
			}
		}
		if time.Now().After(deadline) {
			return n - got, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case err := <-done:
			return 0, fmt.Errorf("worker stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// cpuMark is the CPU times and the clock at the start of a fan-out event.
type cpuMark struct {
	pg     map[int]time.Duration // nil when PostgreSQL's processes cannot be read
	self   time.Duration
	rcv    time.Duration
	rcvErr error
	wall   time.Time
}

// markCPU reads the CPU times of the PostgreSQL backends, this process and
// the receiver process, and the clock.
func (h *harness) markCPU(ctx context.Context, rp *receiverProc) cpuMark {
	var m cpuMark
	m.pg = h.pgBackendCPU(ctx)
	m.self = cost.SelfCPU()
	m.rcv, m.rcvErr = cost.ProcessCPU(rp.pid())
	m.wall = time.Now()
	return m
}

// spent sets ev's wall time up to drainedAt and the CPU time each process
// spent since the mark.
func (m cpuMark) spent(ctx context.Context, h *harness, rp *receiverProc, drainedAt time.Time, ev *fanoutEvent) error {
	ev.wall = drainedAt.Sub(m.wall)
	ev.self = cost.SelfCPU() - m.self
	rcv1, err := cost.ProcessCPU(rp.pid())
	if err = errors.Join(m.rcvErr, err); err != nil {
		return fmt.Errorf("receiver CPU: %w", err)
	}
	ev.receiver = rcv1 - m.rcv
	pg1 := h.pgBackendCPU(ctx)
	if m.pg == nil || pg1 == nil {
		ev.pgUnknown = true
		return nil
	}
	for pid, c := range pg1 {
		ev.pg += c - m.pg[pid] // a backend born during the event counts whole
	}
	for pid := range m.pg {
		if _, ok := pg1[pid]; !ok {
			ev.pgVanished++
		}
	}
	return nil
}

// latencies sets ev's message count and its latencies from the commit of
// event id to each message, and to drainedAt.
func (h *harness) latencies(id uuid.UUID, drainedAt time.Time, ev *fanoutEvent) {
	h.mu.Lock()
	commit := h.commits[id]
	lat := make([]time.Duration, 0, len(h.arrivals[id]))
	for _, at := range h.arrivals[id] {
		lat = append(lat, at.Sub(commit))
	}
	h.mu.Unlock()
	slices.Sort(lat)
	ev.msgs = len(lat)
	if len(lat) > 0 {
		ev.first, ev.p50, ev.p95, ev.last = lat[0], shared.Quantile(lat, .5), shared.Quantile(lat, .95), lat[len(lat)-1]
	}
	ev.drained = drainedAt.Sub(commit)
}

func (h *harness) queryInt(ctx context.Context, sql string, args ...any) (int64, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var n int64
	err := h.pool.QueryRow(qctx, sql, args...).Scan(&n)
	return n, err
}

// pgBackendCPU samples the CPU time of every PostgreSQL backend connected
// to the scratch database, by process id. It returns nil when the server's
// processes cannot be read (PostgreSQL on another machine or in another
// PID namespace). Shared processes (WAL writer, checkpointer) are left out:
// other databases use them too.
func (h *harness) pgBackendCPU(ctx context.Context) map[int]time.Duration {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := h.pool.Query(qctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return nil
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil
	}
	out := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		c, err := cost.ProcessCPU(int(pid))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // ended meanwhile, or not ours to see
			}
			return nil
		}
		out[int(pid)] = c
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func fanoutSummary(o *options, events []fanoutEvent, machine string, decryptErrors []string, wall time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "push_handoff fan-out: one event to every device of a space, commit -> each device's decrypted message\n")
	fmt.Fprintf(&b, "date %s, %s, %d CPUs, GOMAXPROCS %d; wall %s\n", time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0), wall.Round(time.Second))
	fmt.Fprintf(&b, "%d devices (one principal each, all readers of one space), %d measured events one after another after one warm-up; receiver in its own process\n", o.devices, o.events)
	b.WriteString(machine)
	fmt.Fprintf(&b, "\n%-6s %7s %7s %10s %10s %10s %10s %10s %9s %9s %9s\n", "event", "jobs", "msgs", "first", "p50", "p95", "last", "drained", "worker", "postgres", "receiver")
	var msgs int
	var self, pg, rcv time.Duration
	pgUnknown, vanished := false, 0
	var lasts []time.Duration
	for i, ev := range events {
		fmt.Fprintf(&b, "%-6d %7d %7d %10s %10s %10s %10s %10s %8.2fs %8.2fs %8.2fs\n", i+1, ev.jobs, ev.msgs,
			ms(ev.first), ms(ev.p50), ms(ev.p95), ms(ev.last), ms(ev.drained), ev.self.Seconds(), ev.pg.Seconds(), ev.receiver.Seconds())
		msgs += ev.msgs
		self, pg, rcv = self+ev.self, pg+ev.pg, rcv+ev.receiver
		pgUnknown = pgUnknown || ev.pgUnknown
		vanished += ev.pgVanished
		lasts = append(lasts, ev.last)
	}
	slices.Sort(lasts)
	fmt.Fprintf(&b, "\ncommit -> last device's decrypted message: median %s, max %s\n", ms(shared.Quantile(lasts, .5)), ms(lasts[len(lasts)-1]))
	fmt.Fprintf(&b, "CPU during the measured events: worker process %.2f s, PostgreSQL backends of the run's database %.2f s, receiver process %.2f s\n", self.Seconds(), pg.Seconds(), rcv.Seconds())
	if vanished > 0 {
		fmt.Fprintf(&b, "(%d PostgreSQL backends ended during an event; what they used then is missing)\n", vanished)
	}
	if pgUnknown {
		fmt.Fprintf(&b, "(PostgreSQL's processes could not be read: its CPU is missing from the figures below)\n")
	}
	server := self + pg
	fmt.Fprintf(&b, "messages per CPU-second: server side (worker + PostgreSQL) %.0f, whole run (+ receiver) %.0f; worker alone %.0f, PostgreSQL alone %.0f\n",
		perSecond(msgs, server), perSecond(msgs, server+rcv), perSecond(msgs, self), perSecond(msgs, pg))
	fmt.Fprintf(&b, "decryption or VAPID failures: %d\n", len(decryptErrors))
	for i, e := range decryptErrors {
		if i == 5 {
			break
		}
		fmt.Fprintf(&b, "  %s\n", e)
	}
	return b.String()
}

func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
