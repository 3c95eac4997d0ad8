package egress

import (
	"encoding/binary"
	"net/netip"

	"code.dny.dev/ssrf"
)

// metadata are cloud metadata and host-agent endpoints. They answer with
// credentials to anyone on the instance who asks, so they are refused under
// every policy.
var (
	metadataPrefixes = []netip.Prefix{
		// IPv4 link-local: AWS, GCP, Azure, OpenStack and Oracle metadata
		// (169.254.169.254), AWS ECS task metadata (169.254.170.2), and
		// nothing a webhook or push service would listen on.
		netip.MustParsePrefix("169.254.0.0/16"),
	}
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("fd00:ec2::254"),   // AWS, IPv6
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
		netip.MustParseAddr("168.63.129.16"),   // Azure WireServer
	}
)

// Prefixes of IPv6 forms that carry an IPv4 address.
var (
	ipv4Mapped     = netip.MustParsePrefix("::ffff:0:0/96")   // RFC 4291
	ipv4Translated = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765 (SIIT)
	ipv4Compatible = netip.MustParsePrefix("::/96")           // RFC 4291, deprecated
	sixToFour      = netip.MustParsePrefix("2002::/16")       // RFC 3056
	teredo         = netip.MustParsePrefix("2001::/32")       // RFC 4380
	nat64          = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48")  // RFC 8215
)

var broadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// embeddedIPv4 returns the IPv4 address an IPv6 address carries, where
// reaching the IPv6 address reaches that IPv4 address (through a mapping,
// a tunnel or a translator). The local-use NAT64 prefix is read with the
// /96 layout, the one translators use inside it. :: and ::1 are the IPv6
// unspecified and loopback addresses, not IPv4-compatible ones.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	last32 := func() netip.Addr { return netip.AddrFrom4([4]byte(b[12:16])) }
	switch {
	case ipv4Mapped.Contains(a), ipv4Translated.Contains(a), nat64.Contains(a), nat64Local.Contains(a):
		return last32(), true
	case ipv4Compatible.Contains(a):
		if a == netip.IPv6Unspecified() || a == netip.IPv6Loopback() {
			return netip.Addr{}, false
		}
		return last32(), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case teredo.Contains(a):
		// The client's address is stored with every bit inverted.
		var c [4]byte
		binary.BigEndian.PutUint32(c[:], ^binary.BigEndian.Uint32(b[12:16]))
		return netip.AddrFrom4(c), true
	}
	return netip.Addr{}, false
}

// CheckAddr says why addr may not be reached under p, or returns nil. An
// IPv6 address that carries an IPv4 address is judged as that IPv4 address.
func (p Policy) CheckAddr(addr netip.Addr) error {
	if !addr.IsValid() {
		return refuse("no address")
	}
	addr = addr.WithZone("")
	judged, name := addr, addr.String()
	if v4, ok := embeddedIPv4(addr); ok {
		judged, name = v4, addr.String()+" (carrying "+v4.String()+")"
	}
	if isMetadata(judged) {
		return refuse("address %s is a cloud metadata address", name)
	}
	if judged.IsUnspecified() || judged.IsMulticast() || judged == broadcast {
		return refuse("address %s is not a unicast address", name)
	}
	if p.AllowPrivate {
		return nil
	}
	if why := special(judged); why != "" {
		return refusePrivate("address %s is not public (%s)", name, why)
	}
	return nil
}

func isMetadata(a netip.Addr) bool {
	for _, p := range metadataPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	for _, m := range metadataAddrs {
		if a == m {
			return true
		}
	}
	return false
}

// special names the kind of range a is in when it is not on the public
// internet, or returns "".
func special(a netip.Addr) string {
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	}
	if a.Is4() {
		for _, p := range ssrf.IPv4DeniedPrefixes {
			if p.Contains(a) {
				return "special-purpose range " + p.String()
			}
		}
		return ""
	}
	if !ssrf.IPv6GlobalUnicast.Contains(a) {
		return "outside global unicast " + ssrf.IPv6GlobalUnicast.String()
	}
	for _, p := range ssrf.IPv6DeniedPrefixes {
		if p.Contains(a) {
			return "special-purpose range " + p.String()
		}
	}
	return ""
}
