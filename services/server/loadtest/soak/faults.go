package soak

import (
	"cmp"
	"context"
	"errors"
	"slices"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dburl"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// Fault kinds, in the order the table lists them.
const (
	faultKill         = "kill_worker (SIGKILL + restart)"
	faultTermPool     = "pg_terminate_backend worker pool"
	faultTermListen   = "pg_terminate_backend LISTEN"
	faultPGCrashQuiet = "postgresql crash, workers frozen just before"
	faultPGCrash      = "postgresql crash amid all traffic"
	faultRevokeWH     = "revoke right: webhook owner"
	faultRevokePush   = "revoke right: push receiver"
	faultWH5xx        = "webhook receiver 5xx window"
	faultWHTimeout    = "webhook receiver timeout window"
	faultWH410        = "webhook receiver 410 window (+enable)"
	faultPush5xx      = "push service 5xx window"
)

// action is one planned step of the fault schedule.
type action struct {
	at   time.Duration
	name string
	fn   func(ctx context.Context)
}

// injectFaults runs the schedule until ctx ends: every kind once at a
// random moment, then more kills and terminations at random moments. Kills
// come early in short mode, so the drain also covers what they left.
func (h *harness) injectFaults(ctx context.Context) {
	start := time.Now()
	// In short mode the receiver windows come first and the kills after
	// them: a killed worker stalls the subscriptions it was sending for
	// until another worker takes them over (seconds), and a stalled
	// subscription could miss a short window.
	killLo, killHi, winHi := 0.1, 0.6, 0.0
	if h.opts.short {
		killLo, killHi, winHi = 0.2, 0.35, 0.15
	}
	var windows gosync.WaitGroup
	defer windows.Wait()
	plan := h.everyFaultOnce(killLo, killHi)
	plan = append(plan, h.receiverWindows(winHi, &windows)...)
	plan = append(plan, h.pgCrashes()...)
	plan = append(plan, h.moreProcessFaults(killLo, killHi)...)
	slices.SortStableFunc(plan, func(a, b action) int { return int(a.at - b.at) })
	for _, a := range plan {
		select {
		case <-ctx.Done():
			return // open windows close themselves
		case <-time.After(time.Until(start.Add(a.at))):
		}
		a.fn(ctx)
	}
}

// everyFaultOnce plans one fault of each process and rights kind at a
// random moment; the kill between killLo and killHi of the load.
func (h *harness) everyFaultOnce(killLo, killHi float64) []action {
	return []action{
		{h.randDur(killLo, killHi), "kill", h.killWorker},
		{h.randDur(0.1, 0.6), "terminate pool", h.terminatePool},
		{h.randDur(0.1, 0.6), "terminate listen", h.terminateListen},
		{h.randDur(0.3, 0.7), "revoke webhook", h.revokeWebhook},
		{h.randDur(0.3, 0.7), "revoke push", h.revokePush},
		{h.randDur(0.2, 0.5), "late subscription", h.lateSubscription},
	}
}

// receiverWindow is a time a receiver answers with a fault. It opens at a
// random moment between lo and hi of the load and closes after length
// once the receiver has answered with the fault at least least times; a
// sender stalled by a killed worker may reach it late, so the window may
// outlast the load, by at most a minute.
type receiverWindow struct {
	lo, hi   float64
	length   time.Duration
	least    int64
	answered func() int64
	on, off  func(ctx context.Context)
}

// receiverWindows plans a window of each receiver fault; open waits for
// the windows still open. winHi, when not 0, is the latest any opens.
func (h *harness) receiverWindows(winHi float64, open *gosync.WaitGroup) []action {
	d := h.opts.duration
	answers := func(name string) func() int64 { return func() int64 { return h.target(name).faultResp.Load() } }
	pushAnswers := func() int64 {
		var n int64
		for _, x := range h.devices {
			if x.name == "pu-flaky-phone" {
				n = x.faultResp.Load()
			}
		}
		return n
	}
	hi := func(x float64) float64 { return cmp.Or(winHi, x) }
	return []action{
		h.windowAction(receiverWindow{0.05, hi(0.3), min(6*time.Second, d/5), 2, answers("flaky-5xx"), h.set5xx(true), h.set5xx(false)}, open),
		h.windowAction(receiverWindow{0.05, hi(0.3), min(4*time.Second, d/6), 1, answers("slow-timeout"), h.setTimeout(true), h.setTimeout(false)}, open),
		h.windowAction(receiverWindow{0.05, hi(0.4), 3 * time.Second, 1, answers("gone-410"), h.set410(true), h.set410(false)}, open),
		h.windowAction(receiverWindow{0.05, hi(0.4), 3 * time.Second, 2, pushAnswers, h.setPush5xx(true), h.setPush5xx(false)}, open),
	}
}

// windowAction is the action that opens w and closes it in the background;
// open counts it while it is open.
func (h *harness) windowAction(w receiverWindow, open *gosync.WaitGroup) action {
	return action{h.randDur(w.lo, w.hi), "window", func(ctx context.Context) {
		w.on(ctx)
		open.Add(1)
		go func() {
			defer open.Done()
			until, limit := time.Now().Add(w.length), time.Now().Add(w.length+time.Minute)
			for time.Now().Before(limit) && (time.Now().Before(until) || w.answered() < w.least) {
				time.Sleep(100 * time.Millisecond)
			}
			w.off(context.WithoutCancel(ctx))
		}()
	}}
}

// pgCrashes plans the crashes of the private cluster, or says why there
// are none. Both are an immediate stop and a start (crashPG); the one amid
// all traffic is left out of short mode.
func (h *harness) pgCrashes() []action {
	ok, why := h.pgCrashPlanned()
	switch {
	case !ok:
		h.logf("PostgreSQL crash skipped: %s", why)
		return nil
	case h.opts.short:
		return []action{{h.randDur(0.35, 0.6), "pg crash", h.crashPG(true)}}
	}
	return []action{{h.randDur(0.3, 0.45), "pg crash", h.crashPG(true)},
		{h.randDur(0.55, 0.7), "pg crash", h.crashPG(false)}}
}

// moreProcessFaults plans more of the process faults at random moments,
// about one every d/8 up to three quarters of the load; kills only before
// killHi of it.
func (h *harness) moreProcessFaults(killLo, killHi float64) []action {
	d := h.opts.duration
	var plan []action
	for t := h.randDur(killLo, 0.2+killLo); t < time.Duration(float64(d)*0.75); t += h.randDur(0.08, 0.16) {
		switch h.randN(3) {
		case 0:
			if float64(t) < float64(d)*killHi {
				plan = append(plan, action{t, "kill", h.killWorker})
			}
		case 1:
			plan = append(plan, action{t, "terminate pool", h.terminatePool})
		default:
			plan = append(plan, action{t, "terminate listen", h.terminateListen})
		}
	}
	return plan
}

// killWorker SIGKILLs a random live worker and starts a replacement.
func (h *harness) killWorker(ctx context.Context) {
	ws := h.liveWorkers()
	if len(ws) == 0 {
		return
	}
	p := ws[h.randN(len(ws))]
	h.procMu.Lock()
	h.killed[p] = true
	h.procMu.Unlock()
	victim := p.riverClientID()
	killedAt, killed := h.beginFault(faultKill)
	err := p.kill()
	killed()
	if err != nil {
		h.harnessErr(nil, "SIGKILL %s: %v", p.name, err)
		return
	}
	h.faultMu.add(faultKill, 1)
	// Listed once the process is gone: a job it had finished but whose
	// completion River had not written yet would otherwise count as taken
	// over at once.
	held := h.heldJobs(context.WithoutCancel(ctx), p.name, victim)
	h.measures.Add(1)
	go func() {
		defer h.measures.Done()
		h.measureTakeover(context.WithoutCancel(ctx), p.name, victim, killedAt, held)
	}()
	n, err := h.startWorker(context.WithoutCancel(ctx))
	if err != nil {
		h.problem("restart after SIGKILL of %s: %v", p.name, err)
		return
	}
	h.logf("fault: SIGKILL %s (pid %d, left %d running jobs and sender claims), restarted as %s (pid %d)", p.name, p.pid(), len(held), n.name, n.pid())
}

// terminateTimeout is how long a termination waits for each backend to
// exit. A terminated backend stays in pg_stat_activity until it has exited,
// so without the wait a fault right after this one could take it for a live
// connection.
const terminateTimeout = time.Second

// terminateSQL terminates the backends and waits up to $3 ms for each to
// exit; one that did not in time is not counted.
const terminateSQL = `
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, $3))
FROM pg_stat_activity WHERE datname = $1 AND application_name = ANY ($2)`

// terminate terminates the backends whose application_name is one of names
// and returns how many it terminated, once they have exited.
func (h *harness) terminate(ctx context.Context, names []string) (int, error) {
	var n int
	err := h.query(ctx, 5*time.Second, func(ctx context.Context) error {
		return h.pool.QueryRow(ctx, terminateSQL, dburl.Name(h.dbURL), names, terminateTimeout.Milliseconds()).Scan(&n)
	})
	return n, err
}

// backendWait bounds how long a termination waits for the connections it
// is to terminate. They are missing for a while after every loss, above all
// after a crash of the cluster, which the schedule may have run just
// before: a worker's pool dials again when it next needs a connection, and
// its listener reconnects with backoff, up to
// postgres.ListenerConfig.MaxBackoff (5 s by default) between attempts.
const backendWait = 10 * time.Second

// terminatePool terminates every pool connection of one random worker
// (found by its application_name bothy-worker-<pid>), once it has one.
func (h *harness) terminatePool(ctx context.Context) {
	ws := h.liveWorkers()
	if len(ws) == 0 {
		return
	}
	p := ws[h.randN(len(ws))]
	names := []string{p.appName()}
	waited, ok := h.awaitBackends(ctx, names, 1)
	if !ok {
		return
	}
	_, end := h.beginFault(faultTermPool)
	n, err := h.terminate(ctx, names)
	end()
	if err != nil {
		h.harnessErr(nil, "terminate backends of %s: %v", p.name, err)
		return
	}
	h.faultMu.add(faultTermPool, n)
	h.logf("fault: pg_terminate_backend on %d pool connections of %s (waited %s for one)", n, p.name, waited)
}

// terminateListen terminates the LISTEN connection of every worker, once
// each has one.
func (h *harness) terminateListen(ctx context.Context) {
	var names []string
	for _, p := range h.liveWorkers() {
		names = append(names, p.listenAppName())
	}
	waited, ok := h.awaitBackends(ctx, names, len(names))
	if !ok {
		return
	}
	_, end := h.beginFault(faultTermListen)
	n, err := h.terminate(ctx, names)
	end()
	if err != nil {
		h.harnessErr(nil, "terminate LISTEN backends: %v", err)
		return
	}
	h.faultMu.add(faultTermListen, n)
	h.logf("fault: pg_terminate_backend on %d LISTEN connections of %d workers (waited %s for them)", n, len(names), waited)
}

const countBackendsSQL = `
SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = ANY ($2)`

// errTooFew is awaitBackends' "not yet".
var errTooFew = errors.New("fewer backends than awaited")

// awaitBackends polls (h.query) until there are least or more backends
// whose application_name is one of names, or backendWait has passed, and
// says how long it waited. After backendWait the termination goes ahead
// and may find none: when every termination of a kind found none, the
// report fails (verifyFaults). A failed count is read as "not yet"; the
// termination reports the error. It returns false when ctx ended first:
// the load is over and the fault is not injected.
func (h *harness) awaitBackends(ctx context.Context, names []string, least int) (time.Duration, bool) {
	start := time.Now()
	_ = h.query(ctx, backendWait, func(ctx context.Context) error {
		var n int
		if err := h.pool.QueryRow(ctx, countBackendsSQL, dburl.Name(h.dbURL), names).Scan(&n); err != nil {
			return err
		}
		if n < least {
			return errTooFew
		}
		return nil
	})
	return time.Since(start).Round(10 * time.Millisecond), ctx.Err() == nil
}

// revokeWebhook revokes the right of the owner of "revoked-owner"; its
// deliveries must stop: none of an event committed after the revocation,
// none started after it.
func (h *harness) revokeWebhook(ctx context.Context) {
	t := h.target("revoked-owner")
	var head int64
	err := h.query(ctx, 10*time.Second, func(ctx context.Context) error {
		if err := authz.Revoke(ctx, h.pool, t.space, t.owner); err != nil {
			return err
		}
		var err error
		head, err = postgres.Head(ctx, h.pool)
		return err
	})
	if err != nil {
		h.harnessErr(nil, "revoke webhook owner: %v", err)
		return
	}
	t.mu.Lock()
	t.revoked, t.revokedAt, t.revokedSeq = true, time.Now(), head
	t.mu.Unlock()
	h.faultMu.add(faultRevokeWH, 1)
	h.logf("fault: revoked %s on %s (owner of %s) at head %d", t.owner, t.space, t.name, head)
}

// revokePush revokes pu-revoked's read on spaceA.
func (h *harness) revokePush(ctx context.Context) {
	var d *device
	for _, x := range h.devices {
		if x.principal == "pu-revoked" {
			d = x
		}
	}
	var head int64
	err := h.query(ctx, 10*time.Second, func(ctx context.Context) error {
		if err := authz.Revoke(ctx, h.pool, spaceA, d.principal); err != nil {
			return err
		}
		var err error
		head, err = postgres.Head(ctx, h.pool)
		return err
	})
	if err != nil {
		h.harnessErr(nil, "revoke push receiver: %v", err)
		return
	}
	h.procMu.Lock()
	h.pushRevokedSeq, h.pushRevoked = head, true
	h.procMu.Unlock()
	h.faultMu.add(faultRevokePush, 1)
	h.logf("fault: revoked %s on %s at head %d", d.principal, spaceA, head)
}

func (h *harness) lateSubscription(ctx context.Context) {
	err := h.query(ctx, 10*time.Second, func(ctx context.Context) error {
		_, err := h.createTarget(ctx, "healthy-late", spaceA, "owner-a")
		return err
	})
	if err != nil {
		h.harnessErr([]string{checkLateSubscriber}, "create late subscription: %v", err)
		return
	}
	t := h.target("healthy-late")
	h.logf("created subscription %s mid-stream (resume after %d)", t.name, t.resumes[0])
}

func (h *harness) set5xx(on bool) func(context.Context) {
	return func(context.Context) {
		t := h.target("flaky-5xx")
		if on {
			t.mode.Store(mode5xx)
			h.faultMu.add(faultWH5xx, 0)
			h.logf("fault: %s answers 503", t.name)
			return
		}
		t.mode.Store(modeOK)
		h.logf("%s healthy again", t.name)
	}
}

func (h *harness) setTimeout(on bool) func(context.Context) {
	return func(context.Context) {
		t := h.target("slow-timeout")
		if on {
			t.mode.Store(modeTimeout)
			h.faultMu.add(faultWHTimeout, 0)
			h.logf("fault: %s holds requests for %s (webhooks.timeout %s)", t.name, t.holdFor, whTimeout)
			return
		}
		t.mode.Store(modeOK)
		h.logf("%s healthy again", t.name)
	}
}

// set410 makes gone-410 answer 410 Gone, which disables its subscription;
// when the window closes the soak enables it again (it resumes at the head).
func (h *harness) set410(on bool) func(context.Context) {
	return func(ctx context.Context) {
		t := h.target("gone-410")
		if on {
			t.mode.Store(modeGone)
			h.faultMu.add(faultWH410, 0)
			h.logf("fault: %s answers 410 Gone", t.name)
			return
		}
		t.mode.Store(modeOK)
		// Let answers already given be recorded before enabling, so a late
		// 410 does not disable the enabled subscription again.
		time.Sleep(2*whTimeout + time.Second)
		var res *webhooks.EnableResult
		err := h.query(context.WithoutCancel(ctx), 20*time.Second, func(ctx context.Context) error {
			var err error
			res, err = webhooks.Enable(ctx, h.pool, postgres.CursorStore{}, t.id)
			return err
		})
		if err != nil {
			h.harnessErr([]string{checkEnabledResumes}, "enable %s: %v", t.name, err)
			return
		}
		if res.WasCause == "" {
			h.logf("%s healthy again; it had not been disabled", t.name)
			return
		}
		t.mu.Lock()
		t.resumes = append(t.resumes, res.ResumeAfterSeq)
		t.mu.Unlock()
		h.logf("%s healthy again; enabled (was %s), resumes after %d, %d pending skipped, never delivered %d..%d",
			t.name, res.WasCause, res.ResumeAfterSeq, res.Skipped, res.NotDeliveredFrom, res.NotDeliveredTo)
	}
}

func (h *harness) setPush5xx(on bool) func(context.Context) {
	return func(context.Context) {
		for _, d := range h.devices {
			if d.name == "pu-flaky-phone" {
				d.failing.Store(on)
			}
		}
		if on {
			h.faultMu.add(faultPush5xx, 0)
			h.logf("fault: push service answers 503 for pu-flaky-phone")
			return
		}
		h.logf("push service healthy again for pu-flaky-phone")
	}
}

// drain waits until both cursors are at the head, no active subscription
// has a pending delivery and no delivery job is unfinished.
func (h *harness) drain(ctx context.Context) (bool, time.Duration) {
	t0 := time.Now()
	deadline := t0.Add(h.opts.drainTimeout)
	lastLog := time.Time{}
	for {
		var head, minCursor, pending, open int64
		err := h.query(ctx, 5*time.Second, func(ctx context.Context) error {
			return h.pool.QueryRow(ctx, `
SELECT (SELECT last_seq FROM event_seq),
       (SELECT coalesce(min(last_seq), -1) FROM event_consumer_cursors WHERE name IN ('webhooks', 'push')),
       (SELECT count(*) FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
        WHERE d.status = 'pending' AND s.status = 'active'),
       (SELECT count(*) FROM river_job WHERE kind IN ('push.deliver', 'webhook_out.deliver')
        AND state NOT IN ('completed', 'cancelled', 'discarded'))`).Scan(&head, &minCursor, &pending, &open)
		})
		if err == nil && minCursor == head && pending == 0 && open == 0 {
			h.logf("drained in %.1fs: cursors at head %d, nothing pending", time.Since(t0).Seconds(), head)
			return true, time.Since(t0)
		}
		if time.Since(lastLog) > 5*time.Second {
			lastLog = time.Now()
			h.logf("draining: head %d, lowest cursor %d, %d deliveries pending, %d jobs unfinished (err %v)",
				head, minCursor, pending, open, err)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			h.logf("drain gave up after %s", h.opts.drainTimeout)
			h.logStuck(ctx)
			return false, time.Since(t0)
		}
		h.ensureWorkers(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// logStuck logs what a drain that gave up was waiting for: each unfinished
// delivery job (state, attempts, when it runs next, its last error) and
// each active subscription with pending deliveries (its status, sender
// claim and lowest pending delivery).
func (h *harness) logStuck(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rows, err := h.pool.Query(ctx, `
SELECT id, kind, state, attempt, max_attempts, scheduled_at - now(), coalesce(args->>'subscription_id', ''),
       coalesce(errors[array_upper(errors, 1)]->>'error', '')
FROM river_job WHERE kind IN ('push.deliver', 'webhook_out.deliver') AND state NOT IN ('completed', 'cancelled', 'discarded')
ORDER BY id LIMIT 20`)
	if err != nil {
		h.logf("stuck jobs: %v", err)
		return
	}
	var id int64
	var kind, state, sub, lastErr string
	var attempt, maxAttempts int
	var in time.Duration
	_, err = pgx.ForEachRow(rows, []any{&id, &kind, &state, &attempt, &maxAttempts, &in, &sub, &lastErr}, func() error {
		h.logf("stuck job %d %s %s: attempt %d of %d, scheduled in %s, subscription %s, last error %q",
			id, kind, state, attempt, maxAttempts, in.Round(time.Millisecond), h.targetName(sub), lastErr)
		return nil
	})
	if err != nil {
		h.logf("stuck jobs: %v", err)
	}
	rows, err = h.pool.Query(ctx, `
SELECT s.id::text, s.status, coalesce(s.lease_job_id, 0), coalesce(s.lease_until - now(), '0'), coalesce(s.lease_owner, ''),
       min(d.event_seq), count(*), coalesce(min(d.next_attempt_at) - now(), '0'), max(d.attempts)
FROM webhook_subscriptions s JOIN webhook_deliveries d ON d.subscription_id = s.id AND d.status = 'pending'
WHERE s.status = 'active' GROUP BY s.id`)
	if err != nil {
		h.logf("stuck subscriptions: %v", err)
		return
	}
	var status, owner string
	var leaseJob, head, pending int64
	var until, next time.Duration
	var attempts int
	_, err = pgx.ForEachRow(rows, []any{&sub, &status, &leaseJob, &until, &owner, &head, &pending, &next, &attempts}, func() error {
		h.logf("stuck subscription %s (%s): %d pending from seq %d, next attempt in %s, most attempts %d; sender job %d of %q until %s from now",
			h.targetName(sub), status, pending, head, next.Round(time.Millisecond), attempts, leaseJob, owner, until.Round(time.Millisecond))
		return nil
	})
	if err != nil {
		h.logf("stuck subscriptions: %v", err)
	}
}

// targetName names a subscription by its target, or by its id.
func (h *harness) targetName(id string) string {
	h.procMu.Lock()
	defer h.procMu.Unlock()
	for _, t := range h.targets {
		if t.id.String() == id {
			return t.name
		}
	}
	return id
}
