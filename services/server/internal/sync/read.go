package sync

import (
	"context"
	"errors"
	"regexp"
	"strings"

	"github.com/google/uuid"
)

// Reading the log outside rounds: a space's events for the clients that
// pull them, and a notice when the log may have grown.

// ErrEventNotFound is returned by SpaceEventReader.EventByID for an id that
// names no event in the log: never appended, or removed by retention.
var ErrEventNotFound = errors.New("event not found")

// typePatternRE is the grammar of an event type pattern: an exact type
// ("item.created"), a prefix of whole words followed by ".*" ("item.*") or
// "*" for every type.
var typePatternRE = regexp.MustCompile(`^(\*|[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*(\.\*)?)$`)

// MaxTypePatternLen is the longest pattern that can match a type: types
// are at most 128 bytes.
const MaxTypePatternLen = 128

// ValidTypePattern reports whether p is an event type pattern: item.created,
// item.* or *, at most MaxTypePatternLen bytes.
func ValidTypePattern(p string) bool {
	return len(p) <= MaxTypePatternLen && typePatternRE.MatchString(p)
}

// MatchesType reports whether the type pattern p matches typ.
func MatchesType(p, typ string) bool {
	if prefix, ok := strings.CutSuffix(p, "*"); ok {
		return strings.HasPrefix(typ, prefix)
	}
	return p == typ
}

// SpaceEventsParams selects a page of one space's events.
type SpaceEventsParams struct {
	Space string
	// AfterSeq: only events with a larger seq.
	AfterSeq int64
	// Types, if not empty, keeps the events whose type one of these
	// patterns matches (ValidTypePattern).
	Types []string
	// Limit is the most events returned. Required.
	Limit int
	// ScanLimit bounds how many seqs after AfterSeq one call examines, so
	// a page of a quiet space in a busy log costs a bounded read. Default
	// DefaultScanLimit.
	ScanLimit int64
}

// DefaultScanLimit is SpaceEventsParams.ScanLimit's default.
const DefaultScanLimit = 100_000

// SpaceEventsPage is what a SpaceEvents call found.
type SpaceEventsPage struct {
	// Events of the space after AfterSeq, in seq order.
	Events []Event
	// NextAfter is where the next call continues: the last event's seq
	// when the page is full, else the highest seq examined. Every event of
	// the space up to it was returned or is in an earlier page.
	NextAfter int64
	// Head is the newest seq at the time of the read.
	Head int64
	// Lost is the range between AfterSeq and NextAfter that retention
	// removed; its events of the space cannot be read (Len 0: nothing).
	Lost SeqRange
}

// Done reports whether the page reached the head: nothing after NextAfter
// was committed when it was read.
func (p *SpaceEventsPage) Done() bool { return p.NextAfter >= p.Head }

// SpaceEventReader reads the log for clients that pull a space's events.
// What it returns may include commits that are not durable yet: a caller
// that shows it calls DurabilityBarrier.Durable first, and a NextAfter
// shown as a cursor counts as shown. Its methods stop at context
// cancellation and are safe for concurrent use.
type SpaceEventReader interface {
	// SpaceEvents returns a page of the space's events after
	// params.AfterSeq, read in one statement.
	SpaceEvents(ctx context.Context, params *SpaceEventsParams) (*SpaceEventsPage, error)
	// EventByID returns the event with id, or ErrEventNotFound.
	EventByID(ctx context.Context, id uuid.UUID) (Event, error)
}

// AppendWatcher tells readers outside rounds (long polls, streams) that
// the log may have new events of the space they wait for.
type AppendWatcher interface {
	// Watch registers a reader of space until stop is called. changed
	// returns a channel that is closed at the first notice for space after
	// the call: a reader takes it before it reads and waits on it after
	// finding nothing, so a commit between the two is not missed. Every
	// commit of an event of space is followed by a notice, late when its
	// NOTIFY was lost (SpaceWaker also reads every poll interval), so
	// readers need not poll. Safe for concurrent use; changed must not be
	// called after stop.
	Watch(space string) (changed func() <-chan struct{}, stop func())
}
