package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// CheckURL checks a target URL without resolving it: at most MaxURLLength
// bytes, absolute http or https, a host, a port from 1 to 65535 if one is
// given, no user information (it would be a secret in every listing) and
// no fragment. An IP literal host is judged by CheckAddr, localhost names
// count as loopback, and numeric hosts other than a dotted quad are
// refused. Host names are left to CheckResolved or to Control at dial time.
func (p Policy) CheckURL(raw string) (*url.URL, error) {
	if len(raw) > MaxURLLength {
		return nil, refuse("%d bytes, at most %d", len(raw), MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, refuse("not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, refuse("scheme %q: want an absolute http or https URL", u.Scheme)
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return nil, refuse("no host")
	}
	if u.User != nil {
		return nil, refuse("must not carry user information")
	}
	if u.Fragment != "" {
		return nil, refuse("must not carry a fragment")
	}
	if ps := u.Port(); ps != "" {
		if n, err := strconv.Atoi(ps); err != nil || n < 1 || n > 65535 {
			return nil, refuse("port %s: want 1 to 65535", ps)
		}
	}
	if err := p.checkHost(u.Hostname()); err != nil {
		return nil, err
	}
	return u, nil
}

func (p Policy) checkHost(host string) error {
	if addr, err := netip.ParseAddr(host); err == nil {
		return p.CheckAddr(addr)
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if numericHost(h) {
		return refuse("host %q is a numeric address but not a dotted-quad IPv4 address", host)
	}
	if (h == "localhost" || strings.HasSuffix(h, ".localhost")) && !p.AllowPrivate {
		return refusePrivate("host %q is local", host)
	}
	return nil
}

// numericHost reports whether URL parsers that follow the WHATWG URL
// standard read host as an IPv4 address: its last label is a decimal, octal
// or hexadecimal number. Such hosts (2130706433, 0x7f.1, 0177.0.0.1, 127.1,
// 127.0.0.1.) mean 127.0.0.1 to one client and a DNS name or an error to
// another, so they are refused whatever they resolve to.
func numericHost(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if rest, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(rest, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// Resolver looks host names up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckResolved resolves host with r (within five seconds) and refuses it
// unless it has at least one address and every address passes CheckAddr.
// An IP literal is checked without a lookup.
func (p Policy) CheckResolved(ctx context.Context, r Resolver, host string) error {
	if addr, err := netip.ParseAddr(host); err == nil {
		return p.CheckAddr(addr)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(lctx, "ip", host)
	if err != nil {
		return refuse("cannot resolve %q: %v", host, err)
	}
	if len(addrs) == 0 {
		return refuse("%q resolves to no address", host)
	}
	for _, a := range addrs {
		if err := p.CheckAddr(a); err != nil {
			var r *refusal
			errors.As(err, &r)
			return &refusal{reason: fmt.Sprintf("%q: %v", host, err), private: r != nil && r.private}
		}
	}
	return nil
}

// CheckAddress checks a broker's host:port as CheckURL and CheckResolved
// check a URL's host: a port from 1 to 65535, the host's form, then every
// address it resolves to.
func (p Policy) CheckAddress(ctx context.Context, r Resolver, hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return refuse("address %q: want host:port", hostport)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return refuse("port %s: want 1 to 65535", port)
	}
	if err := p.checkHost(host); err != nil {
		return err
	}
	return p.CheckResolved(ctx, r, host)
}
