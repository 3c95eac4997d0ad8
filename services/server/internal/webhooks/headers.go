package webhooks

import (
	"fmt"
	"net/http"
	"net/textproto"
	"sort"
	"unicode/utf8"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// Bounds of a subscription's custom headers: a request carries them on every
// delivery, so they are kept well below what receivers and proxies accept
// for a whole header block (8 KiB is common).
const (
	// MaxHeaders is the most custom headers one subscription may have.
	MaxHeaders = 20
	// MaxHeaderNameBytes bounds one header name.
	MaxHeaderNameBytes = outbound.MaxHeaderNameBytes
	// MaxHeaderValueBytes bounds one header value.
	MaxHeaderValueBytes = outbound.MaxHeaderValueBytes
	// MaxHeaderBytes bounds the names and values of one subscription together.
	MaxHeaderBytes = 4096
)

// headerName checks one name and returns it canonical. Errors name the
// field as the HTTP API spells it and never contain a value.
func headerName(name string) (string, error) {
	if !outbound.ValidHeaderName(name) {
		return "", fmt.Errorf("%w: headers: name %q: want an HTTP field name (letters, digits and !#$%%&'*+-.^_`|~), at most %d bytes",
			ErrInvalid, truncateName(name), MaxHeaderNameBytes)
	}
	c := textproto.CanonicalMIMEHeaderKey(name)
	if why := outbound.RefusedHeader(c); why != "" {
		return "", fmt.Errorf("%w: headers.%s: this header cannot be set: %s", ErrInvalid, c, why)
	}
	return c, nil
}

func truncateName(name string) string {
	if len(name) <= MaxHeaderNameBytes {
		return name
	}
	cut := MaxHeaderNameBytes
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + "…"
}

func headerValue(name, v string) error {
	switch {
	case len(v) > MaxHeaderValueBytes:
		return fmt.Errorf("%w: headers.%s: value of %d bytes, at most %d", ErrInvalid, name, len(v), MaxHeaderValueBytes)
	case !outbound.ValidHeaderValue(v):
		return fmt.Errorf("%w: headers.%s: value must be non-empty printable ASCII (spaces and tabs inside only)", ErrInvalid, name)
	}
	return nil
}

// normalizeHeaders checks a complete set of custom headers and returns it
// with canonical names. Two names that differ only in case are one header
// and refused.
func normalizeHeaders(in map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(in))
	for _, name := range sortedKeys(in) {
		c, err := headerName(name)
		if err != nil {
			return nil, err
		}
		if _, dup := out[c]; dup {
			return nil, fmt.Errorf("%w: headers.%s: given twice (names are case-insensitive)", ErrInvalid, c)
		}
		if err := headerValue(c, in[name]); err != nil {
			return nil, err
		}
		out[c] = in[name]
	}
	return out, checkHeaderTotals(out)
}

// normalizeHeaderPatch checks a merge patch of custom headers (a value sets
// the header, nil removes it) and returns the names to set, canonical, and
// the names to remove.
func normalizeHeaderPatch(in map[string]*string) (set map[string]string, remove []string, err error) {
	set = map[string]string{}
	seen := map[string]bool{}
	for _, name := range sortedKeys(in) {
		c, err := headerName(name)
		if err != nil {
			return nil, nil, err
		}
		if seen[c] {
			return nil, nil, fmt.Errorf("%w: headers.%s: given twice (names are case-insensitive)", ErrInvalid, c)
		}
		seen[c] = true
		if in[name] == nil {
			remove = append(remove, c)
			continue
		}
		if err := headerValue(c, *in[name]); err != nil {
			return nil, nil, err
		}
		set[c] = *in[name]
	}
	return set, remove, nil
}

// checkHeaderTotals bounds the count and the size of a whole set.
func checkHeaderTotals(h map[string]string) error {
	if len(h) > MaxHeaders {
		return fmt.Errorf("%w: headers: %d headers, at most %d", ErrInvalid, len(h), MaxHeaders)
	}
	n := 0
	for k, v := range h {
		n += len(k) + len(v)
	}
	if n > MaxHeaderBytes {
		return fmt.Errorf("%w: headers: %d bytes of names and values, at most %d", ErrInvalid, n, MaxHeaderBytes)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// MaskHeaders returns h with every value masked (MaskHeaderValue): what
// the API and the CLI show. Never nil.
func MaskHeaders(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = MaskHeaderValue(v)
	}
	return out
}

// MaskedValue is what every custom header value is shown as.
const MaskedValue = "********"

// MaskHeaderValue returns MaskedValue whatever the value: no character of a
// value, nor its length, is shown, as values are often credentials and a
// few characters of one help whoever guesses the rest.
func MaskHeaderValue(string) string { return MaskedValue }

// ShownHeaders returns the headers of delivery d's requests to sub, as the
// API may show them: the custom headers with their values masked
// (MaskHeaderValue), and webhook-id: the one d's newest request was signed
// under, as recorded; before its first request, the event's id, unless the
// subscription sends batches, whose id covers the batch (then none).
// webhook-timestamp and webhook-signature differ at every attempt and are
// not kept.
func ShownHeaders(sub *Subscription, d *DeliveryView) map[string]string {
	msgID := d.SentWebhookID()
	if msgID == "" && sub.Policy.MaxBatch == 0 {
		msgID = d.EventID.String()
	}
	h := http.Header{}
	outbound.SetHeaders(h, sub.Headers, msgID)
	out := make(map[string]string, len(h))
	for name := range h {
		out[name] = h.Get(name)
	}
	for name, v := range sub.Headers {
		if canonical, err := headerName(name); err == nil && out[canonical] == v {
			out[canonical] = MaskHeaderValue(v)
		}
	}
	return out
}
