// Package egress is the one rule for connections bothy opens to addresses
// that its users name: webhook targets, brokers of webhook destinations
// and Web Push endpoints. A URL is checked when it is stored
// (Policy.CheckURL, and Policy.CheckResolved for callers that resolve names
// then; Policy.CheckAddress for a broker's host:port), and every address
// is checked again when a connection is made (Policy.Control, for
// net.Dialer.Control), so a name that resolves somewhere else later (DNS
// rebinding) is refused as well.
//
// The table of special-purpose ranges is code.dny.dev/ssrf's copy of the
// IANA IPv4 and IPv6 special-purpose registries. This package adds what a
// table of prefixes cannot say: IPv6 forms that carry an IPv4 address
// (mapped, compatible, translated, 6to4, Teredo, NAT64) are judged as that
// IPv4 address; cloud metadata endpoints are refused even where private
// targets are allowed; and numeric hosts other than a dotted quad
// (2130706433, 0x7f.1, 0177.0.0.1, 127.1) are refused by name, because
// resolvers and HTTP clients disagree on what they mean.
package egress

import (
	"errors"
	"fmt"
)

// ErrRefused matches (errors.Is) every refusal this package returns. The
// refusal's own message says why, without a prefix, so callers can wrap it
// in their own sentinel.
var ErrRefused = errors.New("refused by the egress policy")

// ErrPrivate matches (errors.Is) the refusals that Policy.AllowPrivate
// would have let through: loopback, private and other non-public
// addresses, and localhost names. Callers add the name of the setting that
// sets AllowPrivate, so the user learns which one to change.
var ErrPrivate = errors.New("private target refused")

// MaxURLLength is the longest URL CheckURL accepts, in bytes.
const MaxURLLength = 2048

// Policy says which targets outgoing connections may reach. The zero value
// is the production policy. It is safe for concurrent use.
type Policy struct {
	// AllowPrivate lets loopback, private, link-local IPv6, shared (CGNAT),
	// documentation, benchmarking and reserved addresses through, for local
	// development and tests (webhooks.allow_private_targets,
	// push.allow_private_targets). Cloud metadata endpoints (all of IPv4
	// link-local among them) and addresses that are not unicast stay
	// refused. Default false.
	AllowPrivate bool
}

// refusal is the error type of every refusal: its text is the reason and
// it matches ErrRefused, and ErrPrivate if AllowPrivate would lift it.
type refusal struct {
	reason  string
	private bool
}

func (r *refusal) Error() string { return r.reason }
func (r *refusal) Is(target error) bool {
	return target == ErrRefused || (r.private && target == ErrPrivate)
}

func refuse(format string, args ...any) error {
	return &refusal{reason: fmt.Sprintf(format, args...)}
}

// refusePrivate is a refusal that AllowPrivate lifts.
func refusePrivate(format string, args ...any) error {
	return &refusal{reason: fmt.Sprintf(format, args...), private: true}
}
