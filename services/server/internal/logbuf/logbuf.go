// Package logbuf batches a server's log output: records are written out
// together every Interval, or sooner when Size bytes wait or a record at
// or above a level arrives (Handler), instead of with one write each. A
// busy api logs a line per request, and on a virtual machine each write is
// a system call that costs about what the rest of the line's work does.
//
// What is buffered when the process is killed is lost: at most Interval of
// records below the urgent level. Warnings and errors, and whatever was
// logged before them, are written at once.
package logbuf

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	gosync "sync"
	"time"
)

// Config configures a Writer.
type Config struct {
	// Interval is the longest a record waits in the buffer. Default 100ms.
	Interval time.Duration
	// Size is how many bytes may wait before they are written at once.
	// Default 64 KiB.
	Size int
}

// Writer buffers what is written to it and writes it to the underlying
// writer in batches. It is safe for concurrent use; each Write is kept
// whole.
type Writer struct {
	cfg Config

	mu      gosync.Mutex
	w       io.Writer
	buf     []byte
	pending *time.Timer // set while buf holds bytes and a flush is scheduled
	err     error       // the first write error, returned by Flush and Close
}

// New returns a Writer to w.
func New(w io.Writer, cfg *Config) *Writer {
	b := &Writer{w: w}
	if cfg != nil {
		b.cfg = *cfg
	}
	b.cfg.Interval = cmp.Or(b.cfg.Interval, 100*time.Millisecond)
	b.cfg.Size = cmp.Or(b.cfg.Size, 64<<10)
	return b
}

// Write buffers p. It writes out the buffer when it holds Size bytes, and
// otherwise makes sure it is written within Interval.
func (b *Writer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	switch {
	case len(b.buf) >= b.cfg.Size:
		b.flushLocked()
	case b.pending == nil:
		b.pending = time.AfterFunc(b.cfg.Interval, func() { _ = b.Flush() })
	}
	return len(p), nil
}

// Flush writes out what is buffered.
func (b *Writer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
	return b.err
}

func (b *Writer) flushLocked() {
	if b.pending != nil {
		b.pending.Stop()
		b.pending = nil
	}
	if len(b.buf) == 0 {
		return
	}
	if _, err := b.w.Write(b.buf); err != nil && b.err == nil {
		b.err = err
	}
	b.buf = b.buf[:0]
}

// Handler wraps h, which writes to w, so that a record at level or above
// is written out at once, with everything before it.
func Handler(h slog.Handler, w *Writer, level slog.Level) slog.Handler {
	return &handler{Handler: h, w: w, level: level}
}

type handler struct {
	slog.Handler
	w     *Writer
	level slog.Level
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= h.level {
		_ = h.w.Flush()
	}
	return err
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{Handler: h.Handler.WithAttrs(attrs), w: h.w, level: h.level}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{Handler: h.Handler.WithGroup(name), w: h.w, level: h.level}
}
