package delivery_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/delivery"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

// The mid-drain kill: killSubs ordered subscriptions on one space, each
// sent killEvents events by a worker process that is SIGKILLed once every
// subscription has had at least killAfter of them answered; its receivers
// take killLatency per request, so a batch of 100 takes two seconds.
const (
	killSubs    = 100
	killEvents  = 200
	killAfter   = 60
	killLatency = 20 * time.Millisecond
	// killSlack is what the bound allows beyond RecordEvery for the
	// recorder's flush (or the step) in progress at the kill, on a
	// loaded test host.
	killSlack = time.Second
)

// workerChildEnv, when set to a database URL, makes the test binary a
// worker process for webhooks on that database (runWorkerChild) instead
// of running tests.
const workerChildEnv = "BOTHY_TEST_WEBHOOK_WORKER_DB"

// killConfig is the delivery config of both the killed worker and the one
// that takes over.
func killConfig() *delivery.DeliverConfig {
	cfg := fastRetries()
	cfg.Senders = killSubs + 10
	cfg.LivenessSettle = time.Millisecond
	cfg.RecordEvery = 100 * time.Millisecond // the default
	return cfg
}

// TestDelivery_WorkerKilledMidDrainRepeatsOnlyInFlight: a worker process
// that drains 100 ordered subscriptions is SIGKILLed in the middle of
// their batches; another process takes them over. Each subscription may
// be sent again only what the killed process had in flight (one request)
// and what it had seen answered within RecordEvery (plus killSlack for the
// flush in progress) before the kill, not the whole batch. Every delivery
// arrives, and the first arrivals are in order.
func TestDelivery_WorkerKilledMidDrainRepeatsOnlyInFlight(t *testing.T) {
	t.Parallel()
	cfg := killConfig()
	b := setupConns(t, cfg, 30)
	rv := newSlowReceiver(t, killLatency)
	for i := range killSubs {
		b.subscribe(t, &webhooks.CreateParams{URL: rv.URL(strconv.Itoa(i))})
	}
	child := startWorkerChild(t, b.db.URL)
	b.emit(t, "s1", killEvents)
	b.round(t)

	testwait.Until(t, 2*time.Minute, func() bool { return fewestFirsts(rv) >= killAfter }, "every subscription is %d into its drain", killAfter)
	killedAt := child.kill(t)
	testwait.Until(t, 10*time.Second, func() bool {
		hs, err := liveness.Holders(context.Background(), b.db.Pool)
		require.NoError(t, err)
		return !slices.ContainsFunc(hs, func(s liveness.Session) bool { return uint32(s.PID) == child.session })
	}, "the killed process's session ends")

	workerProcessWith(t, b, cfg, killSubs+10)
	b.emit(t, "s1", 1)
	b.round(t) // a new job for every subscription, which the live process runs
	testwait.Until(t, 2*time.Minute, func() bool { return fewestFirsts(rv) == killEvents+1 }, "the live process delivers the rest")

	window := cfg.RecordEvery + killSlack
	total, worst, last := 0, 0, time.Duration(0)
	var over []string // subscriptions past the bound
	for i := range killSubs {
		arrivals := rv.Endpoint(strconv.Itoa(i)).Arrivals()
		firsts, repeats := map[int64]time.Time{}, 0
		var order []int64
		for _, a := range arrivals {
			if _, seen := firsts[a.Seq]; seen {
				repeats++
				last = max(last, a.At.Sub(killedAt))
				continue
			}
			firsts[a.Seq] = a.At
			order = append(order, a.Seq)
		}
		require.True(t, slices.IsSorted(order), "subscription %d: first arrivals in order", i)
		answeredLate := 0 // answered within the window before the kill
		for _, at := range firsts {
			if at.Before(killedAt) && killedAt.Sub(at) <= window {
				answeredLate++
			}
		}
		if repeats > 1+answeredLate {
			over = append(over, fmt.Sprintf("%d: %d repeats, %d answered within %s before the kill", i, repeats, answeredLate, window))
		}
		total, worst = total+repeats, max(worst, repeats)
	}
	t.Logf("SIGKILL mid-drain of %d subscriptions: %d repeats in all, at most %d for one subscription, the last %s after the kill",
		killSubs, total, worst, last.Round(time.Millisecond))
	require.Empty(t, over, "subscriptions sent again more than the request in flight and those answered within the window")
}

// newSlowReceiver serves killSubs endpoints, "0", "1", …, each holding
// every request for latency before its 204.
func newSlowReceiver(t *testing.T, latency time.Duration) *webhookstest.Server {
	t.Helper()
	rv := recvtest.Start(t, &webhookstest.Options{Lean: true})
	for i := range killSubs {
		rv.Endpoint(strconv.Itoa(i)).SetRule(webhookstest.Always(webhookstest.Answer{Status: http.StatusNoContent, Delay: latency}))
	}
	return rv
}

// fewestFirsts is the fewest distinct seqs any subscription has received.
func fewestFirsts(rv *webhookstest.Server) int {
	n := -1
	for i := range killSubs {
		if d := rv.Endpoint(strconv.Itoa(i)).Distinct(); n < 0 || d < n {
			n = d
		}
	}
	return n
}

// workerChild is a worker process started from the test binary.
type workerChild struct {
	cmd  *exec.Cmd
	done chan struct{}
	// session is the backend PID of its liveness lock's session.
	session uint32
}

// startWorkerChild starts the test binary as a worker process for
// webhooks on the database at url, with env added to its environment, and
// waits until it runs; the test's end kills it if the test has not.
func startWorkerChild(t *testing.T, url string, env ...string) *workerChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), workerChildEnv+"="+url), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // it dies with the test binary
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &workerChild{cmd: cmd, done: make(chan struct{})}
	ready := make(chan uint32, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if pid, ok := strings.CutPrefix(sc.Text(), "worker ready, session "); ok {
				n, _ := strconv.ParseUint(pid, 10, 32)
				ready <- uint32(n)
			}
		}
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	select {
	case c.session = <-ready:
	case <-c.done:
		t.Fatal("the worker process ended before it ran")
	case <-time.After(30 * time.Second):
		t.Fatal("the worker process did not start")
	}
	return c
}

// kill SIGKILLs the process, waits for its end and returns when it was
// killed.
func (c *workerChild) kill(t *testing.T) time.Time {
	t.Helper()
	require.NoError(t, c.cmd.Process.Kill())
	at := time.Now()
	<-c.done
	return at
}

// runWorkerChild is the worker process of the mid-drain kill: a liveness
// lock and a River client with the delivery worker under its ID, until it
// is killed. It prints its lock's session once it runs.
func runWorkerChild(url string) int {
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fail(err)
	}
	pc.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fail(err)
	}
	h, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: url, Logger: quiet})
	if err != nil {
		return fail(err)
	}
	if err := h.Acquire(ctx); err != nil {
		return fail(err)
	}
	cfg := killConfig()
	if err := childRecordEvery(cfg); err != nil {
		return fail(err)
	}
	// The recorder on connections of its own, as the worker role has it.
	recs := pool.Config()
	recs.MaxConns = delivery.RecordConns
	if cfg.Records, err = pgxpool.NewWithConfig(ctx, recs); err != nil {
		return fail(err)
	}
	del, err := delivery.NewDeliverer(pool, postgres.NewEventLog(pool, nil), nil, cfg)
	if err != nil {
		return fail(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, del)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:                   h.ID(),
		Queues:               map[string]river.QueueConfig{webhooks.Queue: {MaxWorkers: cfg.Senders}},
		Workers:              workers,
		FetchCooldown:        5 * time.Millisecond,
		FetchPollInterval:    20 * time.Millisecond,
		RescueStuckJobsAfter: 10 * time.Minute,
		Logger:               quiet,
	})
	if err != nil {
		return fail(err)
	}
	if err := rc.Start(ctx); err != nil {
		return fail(err)
	}
	fmt.Printf("worker ready, session %d\n", h.PID())
	select {} // until killed
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "worker:", err)
	return 1
}
