package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/kinds"
)

// Destination is where a subscription's messages go: an HTTP receiver
// (Kind outbound.KindHTTP, the subscription's URL) or a broker, whose
// fields Config holds with their credentials whole.
type Destination struct {
	Kind   string
	Config json.RawMessage
}

// IsHTTP says whether d is an HTTP receiver.
func (d *Destination) IsHTTP() bool { return d.Kind == "" || d.Kind == outbound.KindHTTP }

// Redacted is d's fields as they are shown, credentials masked.
func (d *Destination) Redacted() json.RawMessage {
	if d.IsHTTP() {
		return json.RawMessage(`{}`)
	}
	return kinds.All.Redacted(d.Kind, d.Config)
}

// Summary names d where a line has room for it: a broker's kind and
// URL, its password masked; "" for http (its URL is the subscription's).
func (d *Destination) Summary() string {
	if d.IsHTTP() {
		return ""
	}
	var f struct {
		URL string `json:"url"`
	}
	_ = json.Unmarshal(d.Redacted(), &f)
	return strings.TrimSpace(d.Kind + " " + f.URL)
}

// checkedDestination is a validated destination: its kind, its fields as
// stored and, for http, its URL in normal form.
type checkedDestination struct {
	kind   string
	config json.RawMessage
	url    string
}

// splitDestination reads the API's destination object, {"kind": ..., and
// the kind's fields}, into its kind and the fields without it.
func splitDestination(raw json.RawMessage) (string, json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return "", nil, fmt.Errorf("%w: destination: want an object with kind and the kind's fields", ErrInvalid)
	}
	var kind string
	if err := json.Unmarshal(fields["kind"], &kind); err != nil || kind == "" {
		return "", nil, fmt.Errorf("%w: destination.kind: required, one of %s", ErrInvalid, kindNames())
	}
	delete(fields, "kind")
	rest, err := json.Marshal(fields)
	if err != nil {
		return "", nil, fmt.Errorf("destination: %w", err)
	}
	return kind, rest, nil
}

// checkDestination validates a destination object of the API; url is the
// request's url field, which a destination of kind http may carry instead.
// A broker's address is checked with the egress policy as a URL's host is.
func checkDestination(ctx context.Context, res Resolver, raw json.RawMessage, url string, allowPrivate bool) (*checkedDestination, error) {
	kind, fields, err := splitDestination(raw)
	if err != nil {
		return nil, err
	}
	if kind == outbound.KindHTTP {
		return checkHTTPDestination(ctx, res, fields, url, allowPrivate)
	}
	if url != "" {
		return nil, fmt.Errorf("%w: url: a %s destination takes its URL in destination.url", ErrInvalid, kind)
	}
	c, err := kinds.All.Check(kind, fields)
	if errors.Is(err, outbound.ErrUnknownKind) {
		return nil, fmt.Errorf("%w: destination.kind: %q, want one of %s", ErrInvalid, kind, kindNames())
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	p := egress.Policy{AllowPrivate: allowPrivate}
	if err := p.CheckAddress(ctx, res, c.Addr); err != nil {
		return nil, fmt.Errorf("%w: destination.url: %w%s", ErrTargetRefused, err, outbound.PrivateHint(err))
	}
	return &checkedDestination{kind: kind, config: fields}, nil
}

// checkHTTPDestination validates {"kind": "http", "url": ...}.
func checkHTTPDestination(ctx context.Context, res Resolver, fields json.RawMessage, url string, allowPrivate bool) (*checkedDestination, error) {
	var f struct {
		URL string `json:"url"`
	}
	dec := json.NewDecoder(bytes.NewReader(fields))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: destination: an http destination has only url", ErrInvalid)
	}
	switch {
	case f.URL != "" && url != "" && f.URL != url:
		return nil, fmt.Errorf("%w: destination.url: differs from url; give one", ErrInvalid)
	case f.URL == "":
		f.URL = url
	}
	if f.URL == "" {
		return nil, fmt.Errorf("%w: destination.url: required", ErrInvalid)
	}
	u, err := ValidateTarget(ctx, res, f.URL, allowPrivate)
	if err != nil {
		return nil, err
	}
	return &checkedDestination{kind: outbound.KindHTTP, config: json.RawMessage(`{}`), url: u.String()}, nil
}

// checkBatch refuses max_batch for a destination that sends one event per
// message.
func checkBatch(kind string, maxBatch int) error {
	if maxBatch > 0 && kind != "" && kind != outbound.KindHTTP {
		return fmt.Errorf("%w: max_batch: a %s destination takes one event per message", ErrInvalid, kind)
	}
	return nil
}

// checkOrdered refuses the unordered policy for a destination kind that
// needs its messages in seq order: a Redis stream's entry ids are the
// seqs, and an entry cannot be added below the stream's last one.
func checkOrdered(kind, policy string) error {
	if kind == "redis" && policy == PolicyUnordered {
		return fmt.Errorf("%w: policy: a %s destination takes ordered delivery (its entry ids are the events' seqs)", ErrInvalid, kind)
	}
	return nil
}

// kindNames lists the destination kinds for an error.
func kindNames() string {
	return strings.Join(slices.Sorted(maps.Keys(kinds.All)), ", ")
}

// keepMasked returns fields, a destination's new fields of kind, with each
// value that is a masked value as the API shows it for stored replaced by
// the stored value: how an edit that sends a broker's url back as it was
// shown keeps its credentials while other fields change. A masked value
// that is not one stored shows (another host, another kind, or no stored
// destination at all) is refused naming its field: the mask stands for a
// stored credential only.
func keepMasked(kind string, fields json.RawMessage, stored *Destination) (json.RawMessage, error) {
	if !bytes.Contains(fields, []byte(outbound.Masked)) {
		return fields, nil
	}
	var f, shown, was map[string]json.RawMessage
	if err := json.Unmarshal(fields, &f); err != nil {
		return nil, fmt.Errorf("destination: %w", err)
	}
	if stored != nil && stored.Kind == kind {
		_ = json.Unmarshal(stored.Redacted(), &shown)
		_ = json.Unmarshal(stored.Config, &was)
	}
	for _, name := range slices.Sorted(maps.Keys(f)) {
		var v string
		if json.Unmarshal(f[name], &v) != nil || !strings.Contains(v, outbound.Masked) {
			continue
		}
		var s string
		if json.Unmarshal(shown[name], &s) != nil || s != v || was[name] == nil {
			return nil, fmt.Errorf("%w: destination.%s: %s stands for the stored credential, kept only when the rest of the value is unchanged; enter the credential",
				ErrInvalid, name, outbound.Masked)
		}
		f[name] = was[name]
	}
	return json.Marshal(f)
}
