package sync

import (
	"cmp"
	"context"
	"log/slog"
	gosync "sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Waking the readers outside rounds (long polls, streams) by space. A
// NOTIFY event_log carries no payload, so it says only that the log grew;
// waking every reader at each one would make each read its page, a read
// per reader per notification. Instead one SpaceWaker per process reads
// the spaces of the new events once per notification and wakes only the
// readers of those spaces.

// SpaceBroadcast is an AppendWatcher whose readers each watch one space;
// a SpaceWaker wakes them. Its zero value is not usable: use
// NewSpaceBroadcast.
type SpaceBroadcast struct {
	mu     gosync.Mutex
	spaces map[string]*spaceReaders
	// turned is closed, and replaced, whenever the first reader comes or
	// the last one goes (Watched).
	turned chan struct{}
}

// spaceReaders are the readers of one space: ch is closed at the next
// wake of the space, n counts the watches.
type spaceReaders struct {
	ch chan struct{}
	n  int
}

var _ AppendWatcher = (*SpaceBroadcast)(nil)

// NewSpaceBroadcast returns a SpaceBroadcast with no readers.
func NewSpaceBroadcast() *SpaceBroadcast {
	return &SpaceBroadcast{spaces: map[string]*spaceReaders{}, turned: make(chan struct{})}
}

// Watched says whether any reader watches a space now, and returns a
// channel that is closed when that changes: a process listens for
// notifications only while it has readers to wake.
func (b *SpaceBroadcast) Watched() (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.spaces) > 0, b.turned
}

// turn tells Watched's callers that readers came or went; b.mu is held.
func (b *SpaceBroadcast) turn() {
	close(b.turned)
	b.turned = make(chan struct{})
}

// Watch implements AppendWatcher.
func (b *SpaceBroadcast) Watch(space string) (changed func() <-chan struct{}, stop func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.spaces[space]
	if r == nil {
		r = &spaceReaders{ch: make(chan struct{})}
		b.spaces[space] = r
		if len(b.spaces) == 1 {
			b.turn()
		}
	}
	r.n++
	var once gosync.Once
	changed = func() <-chan struct{} {
		b.mu.Lock()
		defer b.mu.Unlock()
		return r.ch
	}
	stop = func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if r.n--; r.n == 0 {
				delete(b.spaces, space)
				if len(b.spaces) == 0 {
					b.turn()
				}
			}
		})
	}
	return changed, stop
}

// Wake wakes the readers of spaces and returns how many it woke. It does
// not block.
func (b *SpaceBroadcast) Wake(spaces []string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	woken := 0
	for _, s := range spaces {
		if r := b.spaces[s]; r != nil {
			woken += r.wake()
		}
	}
	return woken
}

// WakeAll wakes every reader and returns how many it woke.
func (b *SpaceBroadcast) WakeAll() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	woken := 0
	for _, r := range b.spaces {
		woken += r.wake()
	}
	return woken
}

// waiting reports whether any reader watches a space.
func (b *SpaceBroadcast) waiting() bool {
	w, _ := b.Watched()
	return w
}

func (r *spaceReaders) wake() int {
	close(r.ch)
	r.ch = make(chan struct{})
	return r.n
}

// ChangedSpacesParams selects the new events a SpaceWaker asks about.
type ChangedSpacesParams struct {
	// AfterSeq: the events after this seq.
	AfterSeq int64
	// Limit is the most seqs examined: when more follow AfterSeq, no
	// space is read.
	Limit int64
}

// ChangedSpaces is what a ChangedSpacesReader read.
type ChangedSpaces struct {
	// Head is the newest seq at the time of the read.
	Head int64
	// Complete says Spaces holds every space with an event in
	// (AfterSeq, Head]: false when more than Limit seqs follow AfterSeq or
	// Head is below it (a restored database).
	Complete bool
	// Spaces are the distinct spaces of those events, when Complete.
	Spaces []string
}

// ChangedSpacesReader reads which spaces the log's newest events are in.
// It stops at context cancellation and is safe for concurrent use.
type ChangedSpacesReader interface {
	// ChangedSpaces reads the head and, in the same snapshot, the spaces of
	// the events after params.AfterSeq up to it. Every seq up to the head
	// is visible in that snapshot, so the spaces are all of them.
	ChangedSpaces(ctx context.Context, params *ChangedSpacesParams) (*ChangedSpaces, error)
}

// SpaceWakerConfig configures a SpaceWaker.
type SpaceWakerConfig struct {
	// ScanLimit is the most new seqs one read examines; when more came
	// since the last read, every reader is woken. Default 10,000.
	ScanLimit int64
	// PollInterval is the longest Run goes without a read: an event whose
	// notification was lost wakes its readers within it
	// (consumer.poll_interval). Default 1s.
	PollInterval time.Duration
	// ReadTimeout bounds one read. Default 5s.
	ReadTimeout time.Duration
	// Registerer takes the waker's metrics. Default: none kept.
	Registerer prometheus.Registerer
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Values of bothy_event_wake_reads_total's result label.
const (
	wakeSpaces = "spaces"  // woke the readers of the spaces read
	wakeAll    = "all"     // woke every reader: too many new seqs
	wakeError  = "error"   // the read failed: woke every reader
	wakeIdle   = "skipped" // nobody watched: nothing read
)

// SpaceWaker wakes the readers of a SpaceBroadcast whose spaces got
// events. On each Wake (a NOTIFY event_log heard, or the LISTEN connection
// back after a loss), and PollInterval after its last read, it reads the
// spaces of the events committed after the head of its previous read and
// wakes the readers of those spaces; Wakes that come during a read merge
// into one more read. A reader that finds nothing and waits did read
// before its event's commit, so any read that begins after that commit
// sees the event and wakes the reader: the one its notification causes,
// or, when the notification is lost, the next one. Readers need not poll
// themselves. Its first read covers the log from its start. Where the
// waker cannot tell (a read that fails, more than ScanLimit new seqs) it
// wakes every reader, which then read for themselves. While no reader
// watches it reads nothing: a reader that comes registers before its own
// read, so before the notifications that concern it.
type SpaceWaker struct {
	reader ChangedSpacesReader
	bc     *SpaceBroadcast
	cfg    SpaceWakerConfig
	notice chan struct{}
	// seen is the head of the last read that succeeded.
	seen  int64
	reads *prometheus.CounterVec
	woken prometheus.Counter
}

// NewSpaceWaker returns a waker of bc's readers that reads with reader.
func NewSpaceWaker(reader ChangedSpacesReader, bc *SpaceBroadcast, cfg *SpaceWakerConfig) *SpaceWaker {
	c := SpaceWakerConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.ScanLimit = cmp.Or(c.ScanLimit, 10_000)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, 5*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	w := &SpaceWaker{reader: reader, bc: bc, cfg: c, notice: make(chan struct{}, 1),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bothy_event_wake_reads_total",
			Help: "Reads of the spaces of new events, one per notification the process hears (and one per consumer.poll_interval without any), by what they woke: spaces (the long polls and streams of those spaces), all (every one: more new seqs than one read examines), error (the read failed: every one), skipped (nobody waited: nothing read).",
		}, []string{"result"}),
		woken: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bothy_event_waiters_woken_total",
			Help: "Long polls and event streams woken by notifications, each once per wake; each woken one reads the log.",
		}),
	}
	for _, r := range []string{wakeSpaces, wakeAll, wakeError, wakeIdle} {
		w.reads.WithLabelValues(r)
	}
	if c.Registerer != nil {
		c.Registerer.MustRegister(w.reads, w.woken)
	}
	return w
}

// Wake asks for a read of the new events' spaces. It does not block.
func (w *SpaceWaker) Wake() {
	select {
	case w.notice <- struct{}{}:
	default:
	}
}

// Run reads and wakes after every Wake, and PollInterval after the last
// read, until ctx is cancelled, and returns nil then.
func (w *SpaceWaker) Run(ctx context.Context) error {
	poll := time.NewTimer(w.cfg.PollInterval)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.notice:
		case <-poll.C:
		}
		w.read(ctx)
		poll.Reset(w.cfg.PollInterval)
	}
}

// read reads the spaces of the events after the last read's head and
// wakes their readers, or every reader when it cannot tell which.
func (w *SpaceWaker) read(ctx context.Context) {
	if !w.bc.waiting() {
		w.count(wakeIdle, 0)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, w.cfg.ReadTimeout)
	defer cancel()
	cs, err := w.reader.ChangedSpaces(rctx, &ChangedSpacesParams{AfterSeq: w.seen, Limit: w.cfg.ScanLimit})
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return
		}
		w.cfg.Logger.WarnContext(ctx, "event waker: read of new events' spaces failed; woke every long poll and stream", slog.Any("error", err))
		w.count(wakeError, w.bc.WakeAll())
		return
	case !cs.Complete:
		w.count(wakeAll, w.bc.WakeAll())
	default:
		w.count(wakeSpaces, w.bc.Wake(cs.Spaces))
	}
	w.seen = cs.Head
}

// count counts a read that woke woken readers; the read last, so that
// one who sees the read counted sees its wake-ups too.
func (w *SpaceWaker) count(result string, woken int) {
	w.woken.Add(float64(woken))
	w.reads.WithLabelValues(result).Inc()
}

// ListenWhileWatched runs listen (a LISTEN connection that wakes the
// readers) while bc has readers, and for linger after the last one left,
// so that a process nobody pulls events from holds no listening session:
// each notification costs every listening session a transaction to read
// it. listen's connection wakes the readers once it listens, as every
// reconnect does, so what committed before that is read too. It returns
// nil once ctx ends.
func ListenWhileWatched(ctx context.Context, bc *SpaceBroadcast, linger time.Duration, listen func(context.Context) error) error {
	for {
		if !untilWatched(ctx, bc, true, 0) {
			return nil
		}
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = listen(lctx) // it reconnects by itself and returns once lctx ends
		}()
		stillOn := untilWatched(ctx, bc, false, linger)
		cancel()
		<-done
		if !stillOn {
			return nil
		}
	}
}

// untilWatched waits until bc has readers (want true), or has had none
// for linger (want false); false if ctx ended first.
func untilWatched(ctx context.Context, bc *SpaceBroadcast, want bool, linger time.Duration) bool {
	for {
		watched, turned := bc.Watched()
		switch {
		case watched && want:
			return true
		case watched != want:
			select {
			case <-ctx.Done():
				return false
			case <-turned:
			}
		default: // no readers, and none wanted: for linger?
			t := time.NewTimer(linger)
			select {
			case <-ctx.Done():
				t.Stop()
				return false
			case <-t.C:
				return true
			case <-turned:
				t.Stop()
			}
		}
	}
}
