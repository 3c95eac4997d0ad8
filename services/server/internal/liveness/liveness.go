// Package liveness tells other processes, through PostgreSQL itself, whether
// the worker process that claimed some work is still alive, so they can take
// that work over within seconds of the process's death instead of waiting for
// a lease to run out or for River's stuck-job rescue.
//
// While a worker process lives it holds a session-level advisory lock on one
// dedicated connection (Holder), keyed by its River client ID, which River
// writes into river_job.attempted_by of every job it fetches, and which the
// webhook sender writes beside its claim. PostgreSQL releases the lock when
// the session ends (TestHolder/LockEndsWithTheSession): the process was
// killed, the connection was cut, or its host is gone (the session has TCP
// keepalives: probed after 5 s of silence, given up after three unanswered
// probes 2 s apart). Another process that can take the lock
// (pg_try_advisory_xact_lock, released again at its commit) knows the
// owner's session is gone (GoneSQL); the Rescuer makes the River jobs of such
// owners available again (TestRescuer).
//
// A session can end while its process lives (a terminated backend, a
// PostgreSQL restart, a failover). The Holder then locks the same key again
// at once (TestHolder/LocksAgainAfterTheSessionIsCut); it pings its session
// every second, so a server that stopped answering without ending anything
// (a lost primary's machine) counts as a lost session within seconds too
// (TestHolder_LocksAgainWhenItsServerStopsAnswering). Nobody judges
// another process dead within Settle of a loss of every session
// (SettledSQL, TestRescuer/YoungJudgeWaits), so after a restart every live
// process has had time to lock again; a judge that has just started judges
// at once when older sessions of bothy show that no such loss happened
// (TestRescuer/YoungJudgeOfAnOldServerJudges). What is left: a live process whose session is cut
// and that cannot lock again before another process checks may have its work
// taken over while it still runs; that costs a second run of the work (a
// duplicate send at worst), never a loss.
package liveness

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	gosync "sync"
	"time"

	"github.com/bothy/bothy/services/server/internal/dbconn"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// LockClass is the first key of every liveness lock; the second is
// hashtext(client ID). The two-key form keeps these locks apart from the
// single-bigint advisory locks of migrations and producers. ("both")
const LockClass int32 = 0x626f7468

// IDPrefix starts every River client ID that takes part in liveness. Only
// such IDs are ever judged: a job or claim of a process that holds no lock
// (an older binary during a rolling upgrade, a tool) keeps its lease.
const IDPrefix = "bothy-live-"

// Settle is the default for how old a judge's own session must be before it
// may declare another process dead: a PostgreSQL restart ends every session
// at once, and live processes need a moment to lock their keys again.
const Settle = 5 * time.Second

// ErrTaken is returned by Holder.Acquire when another live session holds
// the ID's lock (two processes with one client ID, or a hash collision).
var ErrTaken = errors.New("liveness: the lock of this client ID is held by another session")

// NewID returns a fresh River client ID that takes part in liveness:
// IDPrefix, the host name, the process ID and 64 random bits.
func NewID() string {
	host, _ := os.Hostname()
	host = strings.NewReplacer(".", "_", " ", "_").Replace(cmp.Or(host, "unknown_host"))
	if len(host) > 40 {
		host = host[:40]
	}
	var b [8]byte
	_, _ = crand.Read(b[:])
	return fmt.Sprintf("%s%s-%d-%s", IDPrefix, host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Participates reports whether id is a River client ID that takes part in
// liveness.
func Participates(id string) bool { return strings.HasPrefix(id, IDPrefix) }

// OwnerOf returns the client ID of the process running a job, the last
// element of its attempted_by, or "" if that process takes no part.
func OwnerOf(attemptedBy []string) string {
	if len(attemptedBy) == 0 || !Participates(attemptedBy[len(attemptedBy)-1]) {
		return ""
	}
	return attemptedBy[len(attemptedBy)-1]
}

// GoneSQL returns a boolean SQL expression that is true when the session of
// the process whose client ID is the text expression owner has ended. It
// takes the owner's lock for the rest of the transaction when it is free
// (PostgreSQL releases it at commit or rollback), so two judges never both
// see the same owner gone in overlapping transactions. It is false, without
// trying the lock, unless the judge is settled (SettledSQL with the
// interval in milliseconds given by the SQL expression settleMillis).
func GoneSQL(owner, settleMillis string) string {
	return fmt.Sprintf(`(%s AND pg_try_advisory_xact_lock(%d, hashtext(%s)))`, SettledSQL(settleMillis), LockClass, owner)
}

// SettledSQL returns a boolean SQL expression that is true when a free
// liveness lock may be taken to mean a dead process: no mass loss of
// sessions (a server restart, a failover to a standby) happened within
// the interval in milliseconds given by the SQL expression settleMillis,
// since live processes need a moment to lock their keys again after one.
//
// The judge's own session being older than the interval proves that. A
// young one (the judge's process has just started) may still find proof
// elsewhere: the server has run longer than the interval, and another
// session of bothy's on this database (application_name bothy-..., every
// role's pool and lock sessions) is older than it; a restart or a failover
// ends all of them. Without either, the judge waits.
func SettledSQL(settleMillis string) string {
	age := fmt.Sprintf(`now() - (%s)::float8 * interval '1 millisecond'`, settleMillis)
	return fmt.Sprintf(`(CASE WHEN (SELECT backend_start FROM pg_stat_get_activity(pg_backend_pid())) < %[1]s THEN true
        ELSE pg_postmaster_start_time() < %[1]s AND EXISTS (
            SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'bothy-%%'
                AND backend_start < %[1]s AND pid <> pg_backend_pid()) END)`, age)
}

// HolderConfig configures a Holder.
type HolderConfig struct {
	// ConnString is the database. Required.
	ConnString string
	// ID is the River client ID to hold. Default NewID(); a default ID that
	// is taken is replaced by a fresh one at Acquire.
	ID string
	// ApplicationName names the session in pg_stat_activity. Default
	// "bothy-alive".
	ApplicationName string
	// MinBackoff and MaxBackoff bound the delay between reconnects after
	// the session was lost. Defaults 50ms and 1s: the shorter the gap, the
	// smaller the chance that another process judges this one dead.
	MinBackoff, MaxBackoff time.Duration
	// CheckInterval is how often the held session is pinged, and
	// PingTimeout how long the ping may take before the session counts as
	// lost. Defaults 1s and 3s. A server that stopped answering (its
	// machine lost, or frozen) neither ends the session nor refuses
	// anything, and after a failover the lock lives on the old primary
	// only; without the ping the holder would wait on it for good while
	// others judge this process dead.
	CheckInterval, PingTimeout time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Holder holds a process's liveness lock on one dedicated connection, not
// from a pool, which would hand it back and lose the session. Acquire takes
// it, Run keeps it (locking the same key again after a lost session), Close
// ends the session and so releases it. It must outlive every job the
// process's River client runs: Close comes after River has stopped.
type Holder struct {
	cfg       HolderConfig
	generated bool

	mu        gosync.Mutex
	id        string
	conn      *pgx.Conn
	heldSince time.Time // zero while not held
}

// NewHolder returns a holder; Acquire takes the lock.
func NewHolder(cfg *HolderConfig) (*Holder, error) {
	c := *cfg
	if c.ConnString == "" {
		return nil, errors.New("liveness holder config: ConnString is required")
	}
	h := &Holder{}
	if c.ID == "" {
		c.ID, h.generated = NewID(), true
	}
	if !Participates(c.ID) || len(c.ID) > 100 {
		return nil, fmt.Errorf("liveness holder config: ID %q must start with %q and be at most 100 characters", c.ID, IDPrefix)
	}
	c.ApplicationName = cmp.Or(c.ApplicationName, "bothy-alive")
	c.MinBackoff = cmp.Or(c.MinBackoff, 50*time.Millisecond)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, time.Second)
	c.CheckInterval = cmp.Or(c.CheckInterval, time.Second)
	c.PingTimeout = cmp.Or(c.PingTimeout, 3*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	h.cfg, h.id = c, c.ID
	return h, nil
}

// ID is the client ID whose lock the holder holds; give it to River as
// Config.ID.
func (h *Holder) ID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.id
}

// HeldFor is how long the lock has been held without a break; 0 while it
// is not held.
func (h *Holder) HeldFor() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.heldSince.IsZero() {
		return 0
	}
	return time.Since(h.heldSince)
}

// PID is the backend process ID of the holding session, 0 while none (for
// tests and operators).
func (h *Holder) PID() uint32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return 0
	}
	return h.conn.PgConn().PID()
}

// Acquire connects and takes the lock. It returns ErrTaken when another
// session holds the lock of a configured ID.
func (h *Holder) Acquire(ctx context.Context) error {
	for i := 0; ; i++ {
		err := h.lock(ctx)
		if errors.Is(err, ErrTaken) && h.generated && i < 4 {
			h.mu.Lock()
			h.id = NewID()
			h.mu.Unlock()
			continue
		}
		if err == nil {
			h.cfg.Logger.InfoContext(ctx, "liveness lock held", slog.String("client_id", h.ID()))
		}
		return err
	}
}

// lock opens a session and takes the lock in it.
func (h *Holder) lock(ctx context.Context) error {
	cc, err := pgx.ParseConfig(h.cfg.ConnString)
	if err != nil {
		return fmt.Errorf("liveness: %w", err)
	}
	cc.RuntimeParams["application_name"] = h.cfg.ApplicationName
	dbconn.ApplyDefaults(&cc.Config)
	// The server notices a vanished host within about 11 s instead of the
	// kernel's two hours, and so releases the lock.
	cc.RuntimeParams["tcp_keepalives_idle"] = "5"
	cc.RuntimeParams["tcp_keepalives_interval"] = "2"
	cc.RuntimeParams["tcp_keepalives_count"] = "3"
	// Run's cancellation interrupts the wait with a deadline and nothing
	// else, which leaves the session (and the lock) in place: closing it
	// would release the lock while River still finishes its jobs
	// (TestHolder/RunReturnsOnCancelAndKeepsTheLock).
	cc.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cc)
	if err != nil {
		return fmt.Errorf("liveness: connect: %w", err)
	}
	// An idle session is what this is; a server-wide idle_session_timeout
	// (PostgreSQL 14+) must not end it. Older servers lack the setting.
	_, _ = conn.Exec(cctx, `SET idle_session_timeout = 0`)
	id := h.ID()
	var ok bool
	if err := conn.QueryRow(cctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, LockClass, id).Scan(&ok); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("liveness: lock %s: %w", id, err)
	}
	if !ok {
		_ = conn.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("%w: %s", ErrTaken, id)
	}
	h.mu.Lock()
	h.conn, h.heldSince = conn, time.Now()
	h.mu.Unlock()
	return nil
}

// Run keeps the lock until ctx is cancelled and returns nil then, leaving
// the session open: Close ends it. When the session is lost it reconnects
// with backoff and locks the same key again. Acquire must have succeeded.
func (h *Holder) Run(ctx context.Context) error {
	backoff := time.Duration(0)
	for {
		h.mu.Lock()
		conn := h.conn
		h.mu.Unlock()
		if conn != nil {
			err := h.wait(ctx, conn)
			if ctx.Err() != nil {
				return nil
			}
			h.drop(ctx, conn)
			h.cfg.Logger.WarnContext(ctx, "liveness session lost; locking again", slog.String("client_id", h.ID()), slog.Any("error", err))
			backoff = 0
		}
		err := h.lock(ctx)
		if err == nil {
			h.cfg.Logger.InfoContext(ctx, "liveness lock held again", slog.String("client_id", h.ID()))
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		backoff = min(cmp.Or(backoff*2, h.cfg.MinBackoff), h.cfg.MaxBackoff)
		wait := backoff/2 + rand.N(backoff/2+1)
		h.cfg.Logger.WarnContext(ctx, "liveness lock not held", slog.String("client_id", h.ID()),
			slog.Duration("retry_in", wait), slog.Any("error", err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// wait returns when the session of conn is lost: it ended, or its server
// did not answer a ping within PingTimeout (one every CheckInterval). It
// returns at once when ctx ends, leaving the session in place.
func (h *Holder) wait(ctx context.Context, conn *pgx.Conn) error {
	for {
		// Nothing is ever notified; the wait ends when the session does,
		// or at the next check.
		wctx, cancel := context.WithTimeout(ctx, h.cfg.CheckInterval)
		err := conn.PgConn().WaitForNotification(wctx)
		checkDue := wctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !checkDue {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, h.cfg.PingTimeout)
		err = conn.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the server did not answer a ping within %s: %w", h.cfg.PingTimeout, err)
		}
	}
}

func (h *Holder) drop(ctx context.Context, conn *pgx.Conn) {
	h.mu.Lock()
	if h.conn == conn {
		h.conn, h.heldSince = nil, time.Time{}
	}
	h.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = conn.Close(cctx)
}

// Close ends the session, which releases the lock. Call it after Run has
// returned.
func (h *Holder) Close(ctx context.Context) error {
	h.mu.Lock()
	conn := h.conn
	h.conn, h.heldSince = nil, time.Time{}
	h.mu.Unlock()
	if conn == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return conn.Close(cctx)
}
