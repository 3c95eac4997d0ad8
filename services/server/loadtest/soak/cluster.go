package soak

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/pgcluster"
	"github.com/bothy/bothy/services/server/internal/testsweep"
)

// crashSettings make the private cluster lose, in a crash, every commit
// that nobody flushed (pgcluster.QuietCrashSettings). A producer that
// acknowledges before its commit is on disk then loses acknowledged
// events, and the check of acknowledged events sees it.
var crashSettings = func() map[string]string {
	m := pgcluster.QuietCrashSettings()
	m["shared_buffers"] = "128MB"
	m["max_connections"] = "200"
	return m
}()

// quietWindow is how long the workers are frozen before the quiet crash
// while the producers go on. Their consumer rounds' River jobs and
// deliveries commit synchronously, and each such commit flushes the WAL
// past every producer's commit before it; frozen, they cannot, so what
// survives that crash is what the producers' own flushes made durable.
const quietWindow = time.Second

// crashResult is what one crash put at risk and what it lost.
type crashResult struct {
	kind    string // faultPGCrashQuiet or faultPGCrash
	acked   int    // events acknowledged before the crash
	quiet   int    // of them, acknowledged while the workers were frozen
	missing int    // of them, not in the log at their seq with their id after recovery; -1: not read
}

// startCluster initializes and starts the private cluster in a new
// directory under the system's temporary folder: not under h.tmp, because
// as root the cluster runs as the postgres user, who must reach it. The
// directory is owned (testsweep): a later run stops and removes the
// cluster if this one is killed before stopCluster.
func (h *harness) startCluster(ctx context.Context) error {
	dir, err := testsweep.MkdirTemp("bothy-soak-pg-")
	if err != nil {
		return err
	}
	h.clusterDir = dir
	c, err := pgcluster.New(ctx, &pgcluster.Config{Dir: dir, Port: h.opts.pgPort, Settings: crashSettings})
	if err != nil {
		return err
	}
	h.cluster = c
	if err := c.Start(ctx); err != nil {
		return err
	}
	h.dbURL = c.URL("bothy_soak") // created by the migration
	return nil
}

// stopCluster stops the private cluster and removes its directory, or
// keeps it with --keep.
func (h *harness) stopCluster() {
	if h.clusterDir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if h.cluster != nil {
		if err := h.cluster.Stop(ctx); err != nil {
			_ = h.cluster.Crash(ctx)
		}
	}
	if h.opts.keep && h.cluster != nil {
		_ = testsweep.Disown(h.clusterDir)
		fmt.Fprintf(h.out, "kept: private cluster in %s, stopped (database bothy_soak; pg_ctl -D %s start)\n", h.clusterDir, h.cluster.Data())
		return
	}
	_ = os.RemoveAll(h.clusterDir)
}

// pgCrashPlanned says whether this run crashes PostgreSQL, and if not, why.
func (h *harness) pgCrashPlanned() (bool, string) {
	switch {
	case h.cluster == nil:
		return false, "BOTHY_DATABASE_URL is set; the soak crashes only its own private cluster"
	case h.opts.pgCrash == "off":
		return false, "--pg-crash off"
	}
	return true, ""
}

// freeze is a time the workers were stopped.
type freeze struct{ from, to time.Time }

// crashPG returns the fault that crashes the private cluster and starts it
// again: pg_ctl -m immediate stop, so no checkpoint is written and WAL not
// yet written out is lost, as in a crash of the server, and the start
// recovers from the WAL on disk. With quiet, the workers are frozen
// (SIGSTOP) for quietWindow before it and thawed once the server is back:
// the crash then tests the producers' acknowledgments. Without, it comes
// amid all traffic, where a consumer round's asynchronous commit may be
// lost and must run again. Right after recovery it checks that every event
// acknowledged before the crash is in the log at its seq with its id.
func (h *harness) crashPG(quiet bool) func(ctx context.Context) {
	return func(ctx context.Context) {
		kind := faultPGCrash
		var frozen []*proc
		if quiet {
			kind, frozen = faultPGCrashQuiet, h.liveWorkers()
		}
		_, end := h.beginFault(kind)
		defer end()
		fz := h.freezeWorkers(frozen, quiet)
		defer fz.thaw()
		before := h.ackCount()
		if quiet {
			select {
			case <-ctx.Done():
				return
			case <-time.After(quietWindow):
			}
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		t0 := time.Now()
		acked, ok := h.crashAndStart(rctx)
		if !ok {
			return
		}
		took := time.Since(t0)
		fz.thaw()
		end()
		res := crashResult{kind: kind, acked: len(acked)}
		if quiet {
			res.quiet = len(acked) - before
		}
		h.checkCrash(rctx, res, acked, len(frozen), took)
	}
}

// workerFreeze is the workers a quiet crash stopped (SIGSTOP), and since
// when.
type workerFreeze struct {
	h      *harness
	procs  []*proc
	at     time.Time
	thawed bool
}

// freezeWorkers stops procs and sets h.quiet to quiet until thaw.
func (h *harness) freezeWorkers(procs []*proc, quiet bool) *workerFreeze {
	f := &workerFreeze{h: h, procs: procs, at: time.Now()}
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	}
	h.quiet.Store(quiet)
	return f
}

// thaw resumes the frozen workers and records the freeze; calls after the
// first do nothing.
func (f *workerFreeze) thaw() {
	if f.thawed {
		return
	}
	f.thawed = true
	for _, p := range f.procs {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	f.h.quiet.Store(false)
	if len(f.procs) > 0 {
		f.h.faultLogMu.Lock()
		f.h.freezes = append(f.h.freezes, freeze{from: f.at, to: time.Now()})
		f.h.faultLogMu.Unlock()
	}
}

// crashAndStart crashes the private cluster and starts it again. It
// returns the events acknowledged before the crash, or false when the
// crash or the start failed (a harness error).
func (h *harness) crashAndStart(ctx context.Context) ([]ackedEvent, bool) {
	if err := h.cluster.Crash(ctx); err != nil {
		h.harnessErr(nil, "postgresql crash: %v", err)
		return nil, false
	}
	acked := h.ackedSnapshot()
	port := h.cluster.Port()
	if err := h.cluster.Start(ctx); err != nil {
		h.harnessErr([]string{"every check of the run: PostgreSQL did not come back after the crash"},
			"postgresql start after the crash: %v", err)
		return nil, false
	}
	if h.cluster.Port() != port {
		h.harnessErr([]string{"every check of the run: the workers' database.url names the old port"},
			"postgresql came back on port %d instead of %d (another process took the port while it was down)", h.cluster.Port(), port)
	}
	return acked, true
}

// checkCrash counts the acknowledged events the crash lost, records res
// with them and logs the crash; nFrozen workers were frozen before it. When
// the log cannot be read back, the count is unknown (missing -1): the check
// of every acknowledged event at the end still covers the crash.
func (h *harness) checkCrash(ctx context.Context, res crashResult, acked []ackedEvent, nFrozen int, took time.Duration) {
	missing, err := h.missingAcked(ctx, acked)
	if err != nil {
		h.harnessErr(nil, "postgresql after the crash: read the log back: %v", err)
		missing = -1
	}
	res.missing = missing
	h.faultMu.add(res.kind, 1)
	h.prodMu.Lock()
	h.crashes = append(h.crashes, res)
	h.prodMu.Unlock()
	how := "amid all traffic"
	if res.kind == faultPGCrashQuiet {
		how = fmt.Sprintf("after %s with the %d workers frozen (%d events acknowledged meanwhile)", quietWindow, nFrozen, res.quiet)
	}
	h.logf("fault: PostgreSQL crashed (pg_ctl -m immediate stop) %s, restarted in %.1fs; acknowledged: %d, missing after recovery: %d",
		how, took.Seconds(), res.acked, res.missing)
}

// ackedEvent is an event a producer was told is committed.
type ackedEvent struct {
	id  uuid.UUID
	seq int64
}

func (h *harness) ackCount() int {
	h.prodMu.Lock()
	defer h.prodMu.Unlock()
	return len(h.acked)
}

func (h *harness) ackedSnapshot() []ackedEvent {
	h.prodMu.Lock()
	defer h.prodMu.Unlock()
	out := make([]ackedEvent, 0, len(h.acked))
	for id, seq := range h.acked {
		out = append(out, ackedEvent{id: id, seq: seq})
	}
	return out
}

// missingAcked counts the events of acked that are not in the log at their
// seq with their id: lost, or their seq handed out again.
func (h *harness) missingAcked(ctx context.Context, acked []ackedEvent) (int, error) {
	seqs := make([]int64, len(acked))
	for i, a := range acked {
		seqs[i] = a.seq
	}
	inLog := map[int64]uuid.UUID{}
	err := h.query(ctx, time.Minute, func(ctx context.Context) error {
		rows, err := h.pool.Query(ctx, `SELECT seq, id FROM event_log WHERE seq = ANY ($1)`, seqs)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var seq int64
			var id uuid.UUID
			if err := rows.Scan(&seq, &id); err != nil {
				return err
			}
			inLog[seq] = id
		}
		return rows.Err()
	})
	if err != nil {
		return 0, err
	}
	missing := 0
	for _, a := range acked {
		if inLog[a.seq] != a.id {
			missing++
		}
	}
	return missing, nil
}
