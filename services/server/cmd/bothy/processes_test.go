package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	gosync "sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testsweep"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

var (
	binOnce gosync.Once
	binDir  string
	binPath string
	binErr  error
)

// TestMain makes and drops the tests' databases in the background
// (dbtest.Background) and removes the binary buildBinary built once every
// test is done.
func TestMain(m *testing.M) {
	code := dbtest.Background(m).Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildBinary builds the bothy binary once per test process, in a
// directory owned by it (testsweep): when the test binary is killed, a
// later run kills what still runs from the directory and removes it.
func buildBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = testsweep.MkdirTemp("bothy-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "bothy")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, binErr)
	return binPath
}

// proc is a running bothy process.
type proc struct {
	cmd  *exec.Cmd
	addr chan string
	done chan error
	gone chan struct{} // closed when the process has ended
	mu   gosync.Mutex
	log  strings.Builder
}

var addrLine = regexp.MustCompile(`msg="bothy server started".* addr=(\S+)`)

// startProcess starts bin with args in a process group of its own, which
// the test kills when it ends, also when it fails. The kernel kills the
// process when the test binary dies (a timeout, a SIGKILL), when no
// cleanup runs: the parent-death signal belongs to the thread that
// started the process, so the goroutine that starts and waits for it
// keeps its thread.
func startProcess(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), addr: make(chan string, 1), done: make(chan error, 1), gone: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		defer close(p.gone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if m := addrLine.FindStringSubmatch(line); m != nil {
				p.addr <- m[1]
			}
		}
		p.done <- p.cmd.Wait()
	}()
	require.NoError(t, <-started)
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-p.gone:
		case <-time.After(30 * time.Second):
			t.Errorf("process %v (pid %d) did not end on SIGKILL", args, p.cmd.Process.Pid)
		}
		if t.Failed() {
			t.Logf("process %v log:\n%s", args, p.logText())
		}
	})
	return p
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *proc) waitAddr(t *testing.T) string {
	t.Helper()
	select {
	case a := <-p.addr:
		return a
	case err := <-p.done:
		t.Fatalf("process exited before serving: %v\n%s", err, p.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("process did not start:\n%s", p.logText())
	}
	return ""
}

func (p *proc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.done:
		require.NoError(t, err, "a clean stop exits 0:\n%s", p.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("process did not stop on SIGTERM:\n%s", p.logText())
	}
}

func scrape(t *testing.T, addr, metric string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var lines []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, metric) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// TestWorkerProcessesExactlyOnce runs two real "bothy server --role=worker"
// processes against one database while producers append events, and checks
// that every event became exactly one delivery per subscription, delivered
// in seq order, and that both processes stop cleanly on SIGTERM.
func TestWorkerProcessesExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	db := dbtest.NewDB(t)
	ctx := context.Background()

	require.NoError(t, authz.CreatePrincipal(ctx, db.Pool, "alice", authz.KindUser))
	require.NoError(t, authz.Grant(ctx, db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightAdmin}))

	recv := recvtest.Start(t, &webhookstest.Options{Lean: true})
	const subs = 3
	for i := range subs {
		_, _, err := webhooks.Create(ctx, db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1",
			URL: recv.URL(fmt.Sprintf("sub%d", i)), AllowPrivateTargets: true})
		require.NoError(t, err)
	}

	env := []string{"BOTHY_DATABASE_URL=" + db.URL, "BOTHY_SERVER_LISTEN_ADDR=127.0.0.1:0",
		"BOTHY_WEBHOOKS_ALLOW_PRIVATE_TARGETS=true", "BOTHY_CONSUMER_BATCH_SIZE=20", "BOTHY_CONSUMER_POLL_INTERVAL=200ms"}
	workers := []*proc{startProcess(t, bin, env, "server", "--role=worker"), startProcess(t, bin, env, "server", "--role=worker")}
	addrs := []string{workers[0].waitAddr(t), workers[1].waitAddr(t)}

	log := postgres.NewEventLog(db.Pool, nil)
	defer log.Close()
	const producers, each = 4, 75
	var wg gosync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				_, err := log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
					return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "bob"}}, nil
				})
				require.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	const n = producers * each

	deadline := time.Now().Add(90 * time.Second)
	for {
		var delivered int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'`).Scan(&delivered))
		if delivered == n*subs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivered %d of %d", delivered, n*subs)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Each round writes one delivery row per subscription and event (unique
	// key) and one job per subscription that got any, naming its lowest new
	// seq: a round run twice would repeat a (subscription, seq)
	// job.
	var rows, distinctRows, jobs, distinctJobs int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT (subscription_id, event_seq)) FROM webhook_deliveries`).Scan(&rows, &distinctRows))
	require.Equal(t, n*subs, rows)
	require.Equal(t, rows, distinctRows)
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*), count(DISTINCT (args->>'subscription_id', args->>'seq')) FROM river_job WHERE kind = $1`,
		webhooks.KindDeliver).Scan(&jobs, &distinctJobs))
	require.Equal(t, distinctJobs, jobs, "no duplicate jobs")
	var head, cursor int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT last_seq FROM event_seq), last_seq FROM event_consumer_cursors WHERE name = 'webhooks'`).Scan(&head, &cursor))
	require.Equal(t, head, cursor)

	for _, name := range recv.Endpoints() {
		var last int64
		for _, s := range recv.Endpoint(name).Seqs() {
			require.GreaterOrEqual(t, s, last, "subscription %s: seq %d arrived after %d", name, s, last)
			last = s
		}
		require.Equal(t, int64(n), last, name)
	}
	require.Len(t, recv.Endpoints(), subs)

	for i, a := range addrs {
		t.Logf("worker %d rounds: %s", i, strings.ReplaceAll(scrape(t, a, `bothy_event_consumer_rounds_total{consumer="webhooks"`), "\n", "; "))
	}
	for _, w := range workers {
		w.stop(t)
	}
}

// exited reports whether the process has ended, leaving the result for
// stop.
func (p *proc) exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}
