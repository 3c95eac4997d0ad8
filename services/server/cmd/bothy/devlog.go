package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	gosync "sync"
	"time"

	"github.com/bothy/bothy/services/server/internal/dbfault"
)

// The log of bothy dev's server roles. When the database goes away (a
// failover under --ha, a stopped PostgreSQL) every role logs each failed
// call, most of them with a multi-line connection error; in a terminal that
// is a flood that hides what happened. bothy dev condenses it into one line
// per change, which a probe of the database decides: "database
// unavailable: ..." and "database back after 7.2s". Every other record
// passes through as it is.

// devLogHeld bounds the records held while the first probe runs.
const devLogHeld = 20

// devLogConfig is how the dev log probes the database.
type devLogConfig struct {
	Out   io.Writer // where the state lines go
	Probe func(context.Context) error
	// Interval is the time between probes while the database is down.
	Interval time.Duration
	// Grace is how long after the database is back a database error is
	// taken for an aftermath of the outage (a call that failed before it
	// ended, a library giving up on its retries): if the database answers
	// at once, it is not shown. Later, such an error is shown on one line.
	Grace time.Duration
}

// devDBState is what the handler and its clones (WithAttrs, WithGroup)
// share: whether the database is up, being checked or down.
type devDBState struct {
	ctx context.Context // the probes end with it
	cfg devLogConfig

	mu      gosync.Mutex
	state   devDBStatus
	since   time.Time // when the first record of the outage came
	backAt  time.Time // when the last outage ended
	held    []heldLog // records held while the first probe runs
	dropped int       // records not shown since the outage began
}

type devDBStatus int

const (
	devDBUp devDBStatus = iota
	devDBChecking
	devDBDown
)

type heldLog struct {
	next slog.Handler
	r    slog.Record
}

// devLogHandler passes records to next, except those that say the
// database is unavailable, which drive the shared state instead.
type devLogHandler struct {
	next slog.Handler
	st   *devDBState
}

// newDevLogHandler wraps next; the probes end with ctx.
func newDevLogHandler(ctx context.Context, next slog.Handler, cfg *devLogConfig) slog.Handler {
	return &devLogHandler{next: next, st: &devDBState{ctx: ctx, cfg: *cfg}}
}

func (h *devLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *devLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &devLogHandler{next: h.next.WithAttrs(as), st: h.st}
}

func (h *devLogHandler) WithGroup(name string) slog.Handler {
	return &devLogHandler{next: h.next.WithGroup(name), st: h.st}
}

func (h *devLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn || !unavailableRecord(r) {
		return h.next.Handle(ctx, r)
	}
	st := h.st
	st.mu.Lock()
	defer st.mu.Unlock()
	switch st.state {
	case devDBUp:
		st.state, st.since, st.dropped = devDBChecking, time.Now(), 0
		st.held = append(st.held[:0], heldLog{next: h.next, r: r.Clone()})
		go st.watch()
	case devDBChecking:
		if len(st.held) < devLogHeld {
			st.held = append(st.held, heldLog{next: h.next, r: r.Clone()})
		} else {
			st.dropped++
		}
	case devDBDown:
		st.dropped++
	}
	return nil
}

// watch probes the database. If it answers at once, the held records are
// logged after all, each on one line, unless they came in the grace after
// an outage. Else it says that the database is unavailable, probes until
// it answers and says when it is back.
func (st *devDBState) watch() {
	err := st.probeOnce()
	st.mu.Lock()
	if err == nil || st.ctx.Err() != nil {
		if st.ctx.Err() == nil && time.Since(st.backAt) >= st.cfg.Grace {
			for _, l := range st.held {
				_ = l.next.Handle(st.ctx, flatRecord(l.r))
			}
		}
		st.state, st.held = devDBUp, nil
		st.mu.Unlock()
		return
	}
	st.state, st.dropped, st.held = devDBDown, st.dropped+len(st.held), nil
	fmt.Fprintf(st.cfg.Out, "bothy dev: database unavailable: %s\n", truncate(flat(err.Error()), 200))
	st.mu.Unlock()

	tick := time.NewTicker(st.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-st.ctx.Done():
			return
		case <-tick.C:
		}
		if st.probeOnce() != nil {
			continue
		}
		st.mu.Lock()
		st.state, st.backAt = devDBUp, time.Now()
		fmt.Fprintf(st.cfg.Out, "bothy dev: database back after %s (%d log records about it not shown)\n",
			st.backAt.Sub(st.since).Round(100*time.Millisecond), st.dropped)
		st.mu.Unlock()
		return
	}
}

func (st *devDBState) probeOnce() error {
	ctx, cancel := context.WithTimeout(st.ctx, 5*time.Second)
	defer cancel()
	return st.cfg.Probe(ctx)
}

// unavailableRecord reports whether r's error says that the database is
// unavailable: an error value by dbfault's rules, or by its text as for
// River, which logs its errors as strings.
func unavailableRecord(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if !isErrorKey(a.Key) {
			return true
		}
		switch v := a.Value.Resolve().Any().(type) {
		case error:
			found = !errors.Is(v, context.Canceled) && (dbfault.Unavailable(v) || unavailableText(v.Error()))
		case string:
			found = unavailableText(v)
		}
		return !found
	})
	return found
}

func isErrorKey(k string) bool { return k == "error" || k == "err" }

// unavailableTexts mark the text of a connection that failed or broke,
// as pgx words it.
var unavailableTexts = []string{
	"failed to connect to", "conn closed", "closed pool", "unexpected EOF", "connection refused",
	"connection reset by peer", "broken pipe", "i/o timeout", "context deadline exceeded",
	"(SQLSTATE 08", "(SQLSTATE 57P01)", "(SQLSTATE 57P02)", "(SQLSTATE 57P03)", "(SQLSTATE 25006)",
}

func unavailableText(s string) bool {
	for _, t := range unavailableTexts {
		if strings.Contains(s, t) {
			return true
		}
	}
	return false
}

// flatRecord is r with its errors on one line.
func flatRecord(r slog.Record) slog.Record {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if isErrorKey(a.Key) {
			a = slog.String(a.Key, flat(a.Value.Resolve().String()))
		}
		out.AddAttrs(a)
		return true
	})
	return out
}

// flat is s on one line. pgx words a failed connection one line per
// attempt, often the same twice (with TLS and without); a repeated line is
// left out.
func flat(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" && !slices.Contains(parts, l) {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
