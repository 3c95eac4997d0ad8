package broker

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// Masked stands for a credential wherever a configuration is shown.
const Masked = outbound.Masked

// MaxURLLength is the longest broker URL ParseURL accepts, in bytes.
const MaxURLLength = 2048

// URL is a broker URL parsed by ParseURL.
type URL struct {
	u *url.URL
	// TLS is whether the scheme asks for TLS.
	TLS bool
	// Addr is the broker's host:port, the default port filled in.
	Addr string
}

// Scheme is a URL scheme a broker kind accepts.
type Scheme struct {
	Name        string
	DefaultPort int
	TLS         bool
}

// ParseURL checks raw as the url field of a broker destination: one of
// schemes, a host, a port from 1 to 65535 if one is given, and no query or
// fragment; a path only where pathOK allows it (Redis' database number).
// User information is the broker's credentials. Errors name the field and
// never repeat the URL, which may carry a password.
func ParseURL(raw string, schemes []Scheme, pathOK func(string) bool) (URL, error) {
	if raw == "" {
		return URL{}, Fieldf("url", "missing")
	}
	if len(raw) > MaxURLLength {
		return URL{}, Fieldf("url", "%d bytes, at most %d", len(raw), MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return URL{}, Fieldf("url", "not a URL")
	}
	var sc *Scheme
	names := make([]string, len(schemes))
	for i := range schemes {
		names[i] = schemes[i].Name + "://"
		if strings.EqualFold(u.Scheme, schemes[i].Name) {
			sc = &schemes[i]
		}
	}
	switch {
	case sc == nil:
		return URL{}, Fieldf("url", "scheme %q: want %s", u.Scheme, strings.Join(names, " or "))
	case u.Opaque != "" || u.Hostname() == "":
		return URL{}, Fieldf("url", "no host")
	case u.RawQuery != "" || u.ForceQuery:
		return URL{}, Fieldf("url", "must not carry a query")
	case u.Fragment != "":
		return URL{}, Fieldf("url", "must not carry a fragment")
	case u.Path != "" && u.Path != "/" && (pathOK == nil || !pathOK(u.Path)):
		return URL{}, Fieldf("url", "unexpected path")
	}
	port := sc.DefaultPort
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return URL{}, Fieldf("url", "port %s: want 1 to 65535", ps)
		}
		port = n
	}
	return URL{u: u, TLS: sc.TLS, Addr: net.JoinHostPort(u.Hostname(), strconv.Itoa(port))}, nil
}

// URL returns the parsed URL itself, credentials included: for the
// client that connects, never for showing.
func (b URL) URL() *url.URL {
	if b.u == nil {
		return nil
	}
	c := *b.u
	return &c
}

// Username and Password are the URL's credentials ("" when absent).
func (b URL) Username() string {
	if b.u == nil || b.u.User == nil {
		return ""
	}
	return b.u.User.Username()
}

// Password is the URL's password ("" when absent).
func (b URL) Password() string {
	if b.u == nil || b.u.User == nil {
		return ""
	}
	p, _ := b.u.User.Password()
	return p
}

// RedactURL returns raw with its password masked, and a user name without
// a password too when userIsSecret (a NATS token travels so). A URL that
// does not parse is masked whole: it may be all credential.
func RedactURL(raw string, userIsSecret bool) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Masked
	}
	if u.User == nil {
		return raw
	}
	_, hasPassword := u.User.Password()
	switch {
	case hasPassword:
		u.User = url.UserPassword(u.User.Username(), Masked)
	case userIsSecret && u.User.Username() != "":
		u.User = url.User(Masked)
	}
	// url.URL.String escapes the mask's asterisks in user information;
	// they are left as they are so the mask reads as the API's others.
	return strings.ReplaceAll(u.String(), "%2A", "*")
}
