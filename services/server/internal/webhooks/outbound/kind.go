package outbound

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	gosync "sync"
	"time"

	"github.com/bothy/bothy/services/server/internal/egress"
)

// KindHTTP is the kind of a destination that is an HTTP receiver, the
// subscription's url; every other kind is a broker whose fields are the
// subscription's destination.
const KindHTTP = "http"

// Masked replaces a credential wherever a destination is shown.
const Masked = "********"

// ErrUnknownKind is returned for a destination kind no Driver serves.
var ErrUnknownKind = errors.New("unknown destination kind")

// Driver is one destination kind as the registry (Kinds) knows it: how
// its fields are checked and how a process opens its destinations. NewDriver
// makes one from a kind's package.
type Driver struct {
	// Check parses and validates a destination's fields (JSON), naming
	// the bad field as "destination.<name>".
	Check func(raw json.RawMessage) (Checked, error)
	// Open returns the process's pool of this kind's destinations.
	Open func(o *OpenParams) Opener
	// Fields are the kind's destination fields, in the order its Config
	// declares them: what a form asks for. Check alone decides what is
	// valid.
	Fields []Field
}

// Field is one of a kind's destination fields, named as its JSON names it.
type Field struct {
	Name string
	// Number says the value is a whole number (a string otherwise).
	Number bool
	// Optional says the field may be left out: the kind has a default.
	Optional bool
	// Credential says the value may carry credentials, which are shown
	// masked: every kind keeps them in its url.
	Credential bool
}

// fieldsOf lists the JSON fields of the struct type C.
func fieldsOf[C any]() []Field {
	t := reflect.TypeFor[C]()
	var out []Field
	for i := range t.NumField() {
		sf := t.Field(i)
		name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if !sf.IsExported() || name == "" || name == "-" {
			continue
		}
		k := sf.Type.Kind()
		out = append(out, Field{Name: name, Number: k >= reflect.Int && k <= reflect.Uint64,
			Optional: strings.Contains(opts, "omitempty"), Credential: name == "url"})
	}
	return out
}

// Checked is what Check found in a destination's fields.
type Checked struct {
	// Redacted is the fields as the API, console, CLI and logs show them:
	// credentials masked.
	Redacted json.RawMessage
	// Addr is the host:port the destination dials, for the egress check
	// when it is stored; "" for none.
	Addr string
}

// OpenParams are what a process's destinations are opened with.
type OpenParams struct {
	// Policy is the egress policy every dial goes through.
	Policy egress.Policy
	// Timeout bounds one attempt (webhooks.timeout).
	Timeout time.Duration
	// MaxResponseBytes is the most of an HTTP answer read.
	MaxResponseBytes int
	Logger           *slog.Logger
}

// Opener makes the destinations of one kind for one process, sharing its
// connections among them; it is safe for concurrent use.
type Opener interface {
	// Destination returns the destination of target t, whose fields
	// (t.Config) Check accepted.
	Destination(t *Target) (Destination, error)
	// Close closes every connection the opener made.
	Close()
}

// KindConfig is what a kind's package parses a destination's fields into.
type KindConfig[C any] interface {
	Redacted() C
	Addr() string
}

// KindPool is a kind's package's pool of connections.
type KindPool[C any] interface {
	Destination(c C, t *Target) Destination
	Close()
}

// NewDriver makes the Driver of a kind's package from its ParseConfig and
// NewPool (see the rabbitmq package for the shape).
func NewDriver[C KindConfig[C], P KindPool[C]](parse func(json.RawMessage) (C, error),
	newPool func(egress.Policy, *slog.Logger) P) Driver {
	return Driver{
		Check: func(raw json.RawMessage) (Checked, error) {
			c, err := parse(raw)
			if err != nil {
				return Checked{}, err
			}
			red, err := json.Marshal(c.Redacted())
			if err != nil {
				return Checked{}, fmt.Errorf("destination: %w", err)
			}
			return Checked{Redacted: red, Addr: c.Addr()}, nil
		},
		Open:   func(o *OpenParams) Opener { return &poolOpener[C, P]{parse: parse, pool: newPool(o.Policy, o.Logger)} },
		Fields: fieldsOf[C](),
	}
}

// poolOpener adapts a kind's pool to Opener.
type poolOpener[C KindConfig[C], P KindPool[C]] struct {
	parse func(json.RawMessage) (C, error)
	pool  P
}

func (o *poolOpener[C, P]) Destination(t *Target) (Destination, error) {
	c, err := o.parse(t.Config)
	if err != nil {
		return nil, err
	}
	return o.pool.Destination(c, t), nil
}

func (o *poolOpener[C, P]) Close() { o.pool.Close() }

// Kinds is the registry of destination kinds, by name.
type Kinds map[string]Driver

// Check validates the fields of a destination of kind.
func (k Kinds) Check(kind string, raw json.RawMessage) (Checked, error) {
	d, ok := k[kind]
	if !ok {
		return Checked{}, fmt.Errorf("%w: destination.kind: %q", ErrUnknownKind, kind)
	}
	return d.Check(raw)
}

// Redacted is the fields of a stored destination as they are shown,
// credentials masked; {} when they cannot be read (a row written by hand).
func (k Kinds) Redacted(kind string, raw json.RawMessage) json.RawMessage {
	c, err := k.Check(kind, raw)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return c.Redacted
}

// Destinations are one process's destinations of every kind in the
// registry. Each kind's opener is opened at its first use, so a process
// with no subscription of a kind opens nothing of it. It is safe for
// concurrent use.
type Destinations struct {
	kinds  Kinds
	open   OpenParams
	mu     gosync.Mutex
	pools  map[string]Opener
	closed bool
}

// Open returns the destinations of every kind in k, opened with o.
func (k Kinds) Open(o *OpenParams) *Destinations {
	return &Destinations{kinds: k, open: *o, pools: map[string]Opener{}}
}

// For returns the destination of target t (t.Kind, "" meaning http).
func (d *Destinations) For(t *Target) (Destination, error) {
	kind := t.Kind
	if kind == "" {
		kind = KindHTTP
	}
	d.mu.Lock()
	o, ok := d.pools[kind]
	if !ok {
		drv, known := d.kinds[kind]
		if !known || d.closed {
			d.mu.Unlock()
			if d.closed {
				return nil, errors.New("destinations closed: the process is stopping")
			}
			return nil, fmt.Errorf("%w: %q", ErrUnknownKind, kind)
		}
		o = drv.Open(&d.open)
		d.pools[kind] = o
	}
	d.mu.Unlock()
	dest, err := o.Destination(t)
	if err != nil {
		return nil, err
	}
	return timed{dest}, nil
}

// timed gives the answers of a kind that does not time its attempts (the
// brokers; HTTP times the request alone) the time Send took.
type timed struct{ Destination }

func (d timed) Send(ctx context.Context, m *Message, ts time.Time) Answer {
	start := time.Now()
	a := d.Destination.Send(ctx, m, ts)
	if a.Duration == 0 {
		a.Duration = time.Since(start)
	}
	return a
}

// Close closes every opener's connections, and no kind opens after it.
// A send already under way, or one after it, is answered as its opener
// answers once closed: HTTP's client keeps sending (Close only lets idle
// connections go), a broker's pool answers Retry.
func (d *Destinations) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, o := range d.pools {
		o.Close()
	}
}
