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

// devLogHeld bounds the records held while the first probe runs; they are
// logged after all if the database answers at once.
const devLogHeld = 20

// devDBState is what the handler and its clones (WithAttrs, WithGroup)
// share: whether the database is up, being checked or down.
type devDBState struct {
	ctx      context.Context // the probes end with it
	out      io.Writer       // where the state lines go
	probe    func(context.Context) error
	interval time.Duration // between probes while the database is down

	mu      gosync.Mutex
	state   devDBStatus
	since   time.Time // when the first record of the outage came
	held    []heldLog // records held while the first probe runs
	dropped int       // records not shown since then
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

// newDevLogHandler wraps next; the state lines go to out, probe tells
// whether the database answers again, and the probes end with ctx.
func newDevLogHandler(ctx context.Context, next slog.Handler, out io.Writer, probe func(context.Context) error, interval time.Duration) slog.Handler {
	return &devLogHandler{next: next, st: &devDBState{ctx: ctx, out: out, probe: probe, interval: interval}}
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

// watch probes the database: if it answers at once, the held records are
// logged after all; else it says the database is unavailable, probes
// until it answers and says when it is back.
func (st *devDBState) watch() {
	err := st.probeOnce()
	st.mu.Lock()
	if err == nil || st.ctx.Err() != nil {
		held := st.held
		st.state, st.held = devDBUp, nil
		st.mu.Unlock()
		if st.ctx.Err() == nil {
			for _, l := range held {
				_ = l.next.Handle(st.ctx, l.r)
			}
		}
		return
	}
	st.state, st.dropped, st.held = devDBDown, st.dropped+len(st.held), nil
	fmt.Fprintf(st.out, "bothy dev: database unavailable: %s\n", oneLine(err))
	st.mu.Unlock()

	tick := time.NewTicker(st.interval)
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
		fmt.Fprintf(st.out, "bothy dev: database back after %s (%d log records about it not shown)\n",
			time.Since(st.since).Round(100*time.Millisecond), st.dropped)
		st.state = devDBUp
		st.mu.Unlock()
		return
	}
}

func (st *devDBState) probeOnce() error {
	ctx, cancel := context.WithTimeout(st.ctx, 5*time.Second)
	defer cancel()
	return st.probe(ctx)
}

// unavailableRecord reports whether r's error says that the database is
// unavailable: an error value by dbfault's rules, or by its text as for
// River, which logs its errors as strings.
func unavailableRecord(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "error" && a.Key != "err" {
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

// oneLine is err's text on one line, at most 200 characters. pgx words a
// failed connection one line per attempt, often the same twice (with TLS
// and without); a repeated line is left out.
func oneLine(err error) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" && !slices.Contains(parts, l) {
			parts = append(parts, l)
		}
	}
	s := strings.Join(parts, " ")
	if r := []rune(s); len(r) > 200 {
		s = string(r[:199]) + "…"
	}
	return s
}
