package sync

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Event is one committed entry of the log.
type Event struct {
	// Seq is the event's position in commit order, starting at 1, without gaps.
	Seq int64
	// CommittedAt is taken under the counter lock right before commit, so it
	// grows with Seq (unless the clock steps back).
	CommittedAt time.Time
	ID          uuid.UUID
	Space       string
	Type        string
	Actor       string
	OccurredAt  time.Time
	Data        json.RawMessage
	// TraceParent is the W3C trace context (version 00) of the producer's
	// span that committed the event, "" if it was not traced. It travels
	// with the event to its jobs and webhook deliveries; it is not part of
	// the Envelope.
	TraceParent string
	// Duplicate is set by Producer.Write on an event whose ID was in the
	// log already, or earlier in the same call: it was not appended again,
	// and the other fields are those of the logged event.
	Duplicate bool
}

// Envelope is the stable JSON shape of an event as it leaves the system (the
// body of a webhook, the reference in a push payload). Fields are only ever
// added, never renamed.
type Envelope struct {
	ID         uuid.UUID       `json:"id"`
	Seq        int64           `json:"seq"`
	Type       string          `json:"type"`
	Space      string          `json:"space"`
	Actor      string          `json:"actor"`
	OccurredAt time.Time       `json:"occurred_at"`
	Data       json.RawMessage `json:"data"`
}

// Envelope returns the event's outside form.
func (e *Event) Envelope() Envelope {
	data := e.Data
	if len(data) == 0 {
		data = json.RawMessage(`{}`)
	}
	return Envelope{ID: e.ID, Seq: e.Seq, Type: e.Type, Space: e.Space, Actor: e.Actor, OccurredAt: e.OccurredAt.UTC(), Data: data}
}

// NewEvent is an event a producer wants to append.
type NewEvent struct {
	// ID identifies the event for receivers (webhook-id) and makes appending
	// it idempotent: an ID already in the log is not appended again (see
	// Producer). Default: a new UUIDv7.
	ID uuid.UUID
	// Space the event belongs to; permissions are checked against it. Required.
	Space string
	// Type such as "item.created": lower-case dotted words. Required.
	Type string
	// Actor is the principal that caused the event. Required.
	Actor string
	// OccurredAt is when it happened in the domain, kept to the microsecond
	// (what the log stores), between the years 0000 and 9999 UTC (what
	// RFC 3339 can write). Default: now.
	OccurredAt time.Time
	// Data must be a JSON object that PostgreSQL's jsonb can store (see
	// Normalize). Default: {}.
	Data json.RawMessage
}

// ErrEventIDConflict is returned (inside an *EventError) by Producer.Write
// when an event's ID is already the ID of a different event, in the log or
// earlier in the same call: one that differs in space, type, actor or data.
// Nothing of the call is committed.
var ErrEventIDConflict = errors.New("event id already names a different event")

// EventError is an error about one event of a Producer.Write call.
type EventError struct {
	// Index is the event's position in the slice the WriteFunc returned.
	Index int
	Err   error
}

func (e *EventError) Error() string { return fmt.Sprintf("append event %d: %v", e.Index, e.Err) }

func (e *EventError) Unwrap() error { return e.Err }

// FieldError says which field of a NewEvent Normalize refused, and why.
type FieldError struct {
	// Field is the field's name in the API: space, type, actor, occurred_at
	// or data.
	Field string
	// Reason is what is wrong with it, for people.
	Reason string
}

func (e *FieldError) Error() string { return "event " + e.Field + ": " + e.Reason }

var (
	typePattern = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)
	namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)
)

// MaxEventData bounds an event's data; larger payloads belong in the domain
// tables, with the event pointing at them.
const MaxEventData = 64 << 10

// MaxEventDataDepth bounds how deeply an event's data nests (the data
// object itself is level 1). PostgreSQL parses JSON recursively within
// max_stack_depth, a server setting, so nesting that the default accepts
// fails on a server configured lower; this bound holds with its smallest
// value (TestEventLog_WriteAcceptsWhatNormalizeAccepts).
const MaxEventDataDepth = 256

var (
	minOccurredAt = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	maxOccurredAt = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

// CheckSpace returns a *FieldError unless space is a valid space name:
// 1-128 characters of ASCII letters, digits and ._:@-.
func CheckSpace(space string) error {
	if !namePattern.MatchString(space) {
		return &FieldError{Field: "space", Reason: fmt.Sprintf("%q: want 1-128 characters of letters, digits and ._:@-", space)}
	}
	return nil
}

// Normalize fills defaults and validates the event, returning a *FieldError
// that names the wrong field. What it accepts, the log can store: data is
// refused where PostgreSQL's jsonb would refuse it (\u0000, lone UTF-16
// surrogates, invalid UTF-8, numbers beyond numeric's range, nesting deeper
// than MaxEventDataDepth), so that an append never fails on its input
// (FuzzEventLogWrite). It never panics, whatever the input.
func (e *NewEvent) Normalize(now time.Time) error {
	if err := CheckSpace(e.Space); err != nil {
		return err
	}
	if !typePattern.MatchString(e.Type) || len(e.Type) > 128 {
		return &FieldError{Field: "type", Reason: fmt.Sprintf("%q: want dotted lower-case words such as item.created", e.Type)}
	}
	if !namePattern.MatchString(e.Actor) {
		return &FieldError{Field: "actor", Reason: fmt.Sprintf("%q: want 1-128 characters of letters, digits and ._:@-", e.Actor)}
	}
	if len(e.Data) == 0 {
		e.Data = json.RawMessage(`{}`)
	}
	if len(e.Data) > MaxEventData {
		return &FieldError{Field: "data", Reason: fmt.Sprintf("%d bytes, at most %d", len(e.Data), MaxEventData)}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(e.Data, &obj); err != nil || obj == nil {
		return &FieldError{Field: "data", Reason: "must be a JSON object"}
	}
	if err := checkJSONB(e.Data); err != nil {
		return &FieldError{Field: "data", Reason: err.Error()}
	}
	if e.ID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("event id: %w", err)
		}
		e.ID = id
	}
	if e.OccurredAt.IsZero() {
		e.OccurredAt = now
	}
	// The log keeps microseconds; an answer shows what a later read shows.
	e.OccurredAt = e.OccurredAt.Truncate(time.Microsecond)
	if u := e.OccurredAt.UTC(); u.Before(minOccurredAt) || u.After(maxOccurredAt) {
		return &FieldError{Field: "occurred_at", Reason: fmt.Sprintf("%s: want a time between the years 0000 and 9999 UTC", u.Format(time.RFC3339))}
	}
	return nil
}

// SeqRange is an inclusive range of sequence numbers.
type SeqRange struct {
	From, To int64
}

// Len is the number of seqs in the range; the zero SeqRange (seqs start
// at 1) is empty.
func (r SeqRange) Len() int64 {
	if r.From < 1 || r.To < r.From {
		return 0
	}
	return r.To - r.From + 1
}

func (r SeqRange) String() string { return fmt.Sprintf("%d..%d", r.From, r.To) }

// PostgreSQL's numeric, which jsonb stores numbers in, holds up to 131072
// digits before the decimal point and 16383 after it, and refuses an
// exponent of INT_MAX/2 or more in either direction whatever the value.
const (
	numericMaxWeight = 131071 // decimal exponent of the leading digit
	numericMaxScale  = 16383  // digits after the point, counting zeros
	numericMaxExp    = 1<<30 - 2
)

// checkJSONB returns an error saying where and why PostgreSQL's jsonb input
// would refuse b, which must be valid JSON (as encoding/json checks it):
// strings (keys too) holding \u0000, a lone UTF-16 surrogate or invalid
// UTF-8, numbers beyond numeric's range, and nesting deeper than
// MaxEventDataDepth.
func checkJSONB(b []byte) error {
	c := &jsonbChecker{b: b, store: "PostgreSQL jsonb"}
	return c.value(1)
}

// CheckJSONText returns an error saying where a string of b, a key or a
// value, holds what PostgreSQL cannot store as text or jsonb: \u0000, a
// lone UTF-16 surrogate or invalid UTF-8. b must be valid JSON (json.Valid
// holds); its numbers and depth are not checked. An HTTP API checks a
// request body with it before any field reaches the database.
func CheckJSONText(b []byte) error {
	c := &jsonbChecker{b: b, store: "PostgreSQL", textOnly: true}
	return c.value(1)
}

// jsonbChecker walks JSON that encoding/json accepted, keeping the JSON
// Pointer (RFC 6901) of where it is for its errors. Malformed input ends the
// walk without a panic, as a refusal.
type jsonbChecker struct {
	b    []byte
	i    int
	path []string
	// store names what refuses the text, for the errors.
	store string
	// textOnly checks strings only, not numbers or depth.
	textOnly bool
}

func (c *jsonbChecker) where() string {
	if len(c.path) == 0 {
		return "at the top level"
	}
	var p []byte
	for _, seg := range c.path {
		p = append(p, '/')
		for _, r := range seg {
			switch r {
			case '~':
				p = append(p, "~0"...)
			case '/':
				p = append(p, "~1"...)
			default:
				p = utf8.AppendRune(p, r)
			}
		}
	}
	return "at " + strconv.Quote(string(p))
}

func (c *jsonbChecker) fail(format string, args ...any) error {
	return fmt.Errorf(format+" (%s)", append(args, c.where())...)
}

func (c *jsonbChecker) skipSpace() {
	for c.i < len(c.b) && (c.b[c.i] == ' ' || c.b[c.i] == '\t' || c.b[c.i] == '\n' || c.b[c.i] == '\r') {
		c.i++
	}
}

func (c *jsonbChecker) value(depth int) error {
	c.skipSpace()
	if c.i >= len(c.b) {
		return c.fail("ends early")
	}
	switch ch := c.b[c.i]; {
	case ch == '{' || ch == '[':
		if !c.textOnly && depth > MaxEventDataDepth {
			return c.fail("nests deeper than %d levels", MaxEventDataDepth)
		}
		return c.container(depth, ch)
	case ch == '"':
		_, err := c.str("string")
		return err
	case ch == 't' || ch == 'f' || ch == 'n':
		for c.i < len(c.b) && c.b[c.i] >= 'a' && c.b[c.i] <= 'z' {
			c.i++
		}
		return nil
	case c.textOnly:
		for c.i < len(c.b) && strings.IndexByte("+-0123456789.eE", c.b[c.i]) >= 0 {
			c.i++
		}
		return nil
	default:
		return c.number()
	}
}

func (c *jsonbChecker) container(depth int, open byte) error {
	c.i++ // { or [
	c.skipSpace()
	end := byte(']')
	if open == '{' {
		end = '}'
	}
	if c.i < len(c.b) && c.b[c.i] == end {
		c.i++
		return nil
	}
	for n := 0; ; n++ {
		seg := strconv.Itoa(n)
		if open == '{' {
			c.skipSpace()
			key, err := c.str("key")
			if err != nil {
				return err
			}
			seg = key
			c.skipSpace()
			if c.i >= len(c.b) || c.b[c.i] != ':' {
				return c.fail("malformed object")
			}
			c.i++
		}
		c.path = append(c.path, seg)
		if err := c.value(depth + 1); err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
		c.skipSpace()
		if c.i >= len(c.b) {
			return c.fail("ends early")
		}
		switch c.b[c.i] {
		case ',':
			c.i++
		case end:
			c.i++
			return nil
		default:
			return c.fail("malformed container")
		}
	}
}

// str checks the string at c.i and returns its text, for the error path
// of what it contains.
func (c *jsonbChecker) str(what string) (string, error) {
	if c.i >= len(c.b) || c.b[c.i] != '"' {
		return "", c.fail("malformed %s", what)
	}
	c.i++
	var text []byte
	for c.i < len(c.b) {
		ch := c.b[c.i]
		switch {
		case ch == '"':
			c.i++
			return string(text), nil
		case ch == '\\':
			if c.i+1 >= len(c.b) {
				return "", c.fail("malformed %s", what)
			}
			if c.b[c.i+1] != 'u' {
				text = append(text, unescape(c.b[c.i+1]))
				c.i += 2
				continue
			}
			r, ok := c.hex4(c.i + 2)
			if !ok {
				return "", c.fail("malformed %s", what)
			}
			c.i += 6
			switch {
			case r == 0:
				return "", c.fail(`a %s contains \u0000, which %s cannot store`, what, c.store)
			case r >= 0xDC00 && r <= 0xDFFF:
				return "", c.fail(`a %s contains a lone UTF-16 surrogate (\u%04x), which %s cannot store`, what, r, c.store)
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := rune(0), false
				if c.i+1 < len(c.b) && c.b[c.i] == '\\' && c.b[c.i+1] == 'u' {
					lo, ok = c.hex4(c.i + 2)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return "", c.fail(`a %s contains a lone UTF-16 surrogate (\u%04x), which %s cannot store`, what, r, c.store)
				}
				c.i += 6
				r = utf16.DecodeRune(r, lo)
			}
			text = utf8.AppendRune(text, r)
		case ch < utf8.RuneSelf:
			text = append(text, ch)
			c.i++
		default:
			r, size := utf8.DecodeRune(c.b[c.i:])
			if r == utf8.RuneError && size == 1 {
				return "", c.fail("a %s is not valid UTF-8, which PostgreSQL cannot store", what)
			}
			text = append(text, c.b[c.i:c.i+size]...)
			c.i += size
		}
	}
	return "", c.fail("malformed %s", what)
}

func unescape(ch byte) byte {
	switch ch {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return ch // " \ /
}

func (c *jsonbChecker) hex4(at int) (rune, bool) {
	if at+4 > len(c.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(c.b[at:at+4]), 16, 32)
	return rune(v), err == nil
}

// number checks the number at c.i against what PostgreSQL's numeric input
// accepts (numeric_in, which jsonb uses).
func (c *jsonbChecker) number() error {
	start := c.i
	for c.i < len(c.b) && strings.IndexByte("+-0123456789.eE", c.b[c.i]) >= 0 {
		c.i++
	}
	num := string(c.b[start:c.i])
	mant, exp, hasExp := strings.Cut(strings.TrimPrefix(num, "-"), "e")
	if !hasExp {
		mant, exp, hasExp = strings.Cut(mant, "E")
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" {
		return c.fail("malformed number")
	}
	e := int64(0)
	if hasExp {
		neg := strings.HasPrefix(exp, "-")
		digits := strings.TrimLeft(strings.TrimLeft(exp, "+-"), "0")
		if len(digits) > 10 {
			return c.numberOutOfRange(num)
		}
		if digits != "" {
			v, err := strconv.ParseInt(digits, 10, 64)
			if err != nil {
				return c.fail("malformed number")
			}
			e = v
		}
		if neg {
			e = -e
		}
	}
	if e > numericMaxExp || e < -numericMaxExp {
		return c.numberOutOfRange(num)
	}
	if max(0, int64(len(frac))-e) > numericMaxScale {
		return c.numberOutOfRange(num)
	}
	// The decimal exponent of the leading non-zero digit; none for zero.
	if t := strings.TrimLeft(intPart, "0"); t != "" {
		if int64(len(t))-1+e > numericMaxWeight {
			return c.numberOutOfRange(num)
		}
	} else if k := strings.IndexFunc(frac, func(r rune) bool { return r != '0' }); k >= 0 {
		if int64(-(k+1))+e > numericMaxWeight {
			return c.numberOutOfRange(num)
		}
	}
	return nil
}

func (c *jsonbChecker) numberOutOfRange(num string) error {
	if len(num) > 40 {
		num = num[:37] + "..."
	}
	return c.fail("number %s is beyond what PostgreSQL numeric can store", num)
}
