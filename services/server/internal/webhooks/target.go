package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrTargetRefused is returned when a target URL is not absolute http(s)
// or resolves to an address outgoing webhooks may not reach.
var ErrTargetRefused = errors.New("webhook target refused")

// metadataAddrs are cloud metadata endpoints. They are refused even when
// private targets are allowed: nothing legitimate listens there for webhooks.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
}

// specialPrefixes are ranges not reachable on the public internet that
// net.IP's predicates do not name: shared address space, "this network",
// IETF protocol assignments, benchmarking, reserved and NAT64 (checked on
// the embedded IPv4 address instead).
var specialPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("2001:db8::/32"),
}

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// CheckAddr says why addr may not be reached, or nil. allowPrivate lets
// loopback, private and link-local addresses through (local development and
// tests), but never cloud metadata endpoints.
func CheckAddr(addr netip.Addr, allowPrivate bool) error {
	addr = addr.Unmap().WithZone("")
	if nat64.Contains(addr) {
		b := addr.As16()
		addr = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	for _, m := range metadataAddrs {
		if addr == m {
			return fmt.Errorf("%w: %s is a cloud metadata address", ErrTargetRefused, addr)
		}
	}
	if !addr.IsValid() || addr.IsUnspecified() || addr.IsMulticast() || addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return fmt.Errorf("%w: %s is not a unicast address", ErrTargetRefused, addr)
	}
	if allowPrivate {
		return nil
	}
	switch {
	case addr.IsLoopback():
		return fmt.Errorf("%w: %s is a loopback address", ErrTargetRefused, addr)
	case addr.IsPrivate():
		return fmt.Errorf("%w: %s is a private address", ErrTargetRefused, addr)
	case addr.IsLinkLocalUnicast():
		return fmt.Errorf("%w: %s is a link-local address", ErrTargetRefused, addr)
	}
	for _, p := range specialPrefixes {
		if p.Contains(addr) {
			return fmt.Errorf("%w: %s is in the special-purpose range %s", ErrTargetRefused, addr, p)
		}
	}
	return nil
}

// Resolver looks host names up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ValidateTarget checks a subscription's URL at creation: absolute http or
// https, a host, no user info (it would be a secret in every listing), and
// every address the host resolves to allowed. The check is repeated at
// every connection (NewHTTPClient), so a later DNS change cannot lead a
// delivery into a refused range.
func ValidateTarget(ctx context.Context, r Resolver, raw string, allowPrivate bool) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not a URL", ErrTargetRefused, raw)
	}
	if !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("%w: %q must be an absolute http or https URL", ErrTargetRefused, raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: the URL must not contain user information", ErrTargetRefused)
	}
	host := u.Hostname()
	if host == "" {
		return nil, fmt.Errorf("%w: %q has no host", ErrTargetRefused, raw)
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("%w: %q must not have a fragment", ErrTargetRefused, raw)
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		return u, CheckAddr(addr, allowPrivate)
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		if err := CheckAddr(netip.MustParseAddr("127.0.0.1"), allowPrivate); err != nil {
			return nil, err
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(lctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot resolve %q: %v", ErrTargetRefused, host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: %q resolves to no address", ErrTargetRefused, host)
	}
	for _, a := range addrs {
		if err := CheckAddr(a, allowPrivate); err != nil {
			return nil, fmt.Errorf("%q: %w", host, err)
		}
	}
	return u, nil
}

// dialControl refuses, at connect time, every address CheckAddr refuses.
// It sees the address after resolution, so DNS rebinding (a name that
// resolved to a public address at creation and to 127.0.0.1 now) is
// refused as well.
func dialControl(allowPrivate bool) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: unparsable address %q", ErrTargetRefused, address)
		}
		return CheckAddr(ap.Addr(), allowPrivate)
	}
}

// NewHTTPClient returns the client deliveries use: no proxy (a proxy would
// connect on our behalf and bypass the address check), no redirects, the
// address check at every dial, and timeout as the bound on a whole attempt.
func NewHTTPClient(timeout time.Duration, allowPrivate bool) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: dialControl(allowPrivate)}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    16,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    min(timeout, 10*time.Second),
		ResponseHeaderTimeout:  timeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
