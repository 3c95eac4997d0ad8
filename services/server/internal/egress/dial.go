package egress

import (
	"net/netip"
	"syscall"
)

// Control is a net.Dialer.Control hook that refuses every connection
// CheckAddr refuses, and anything but TCP. It runs after name resolution,
// once per address tried, so a name that resolved to a public address when
// the URL was stored and to 127.0.0.1 now (DNS rebinding) is refused too.
// A dialer that uses it must not go through a proxy, which would connect
// on its behalf where this hook never sees the address.
func (p Policy) Control(network, address string, _ syscall.RawConn) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return refuse("network %q: only TCP", network)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return refuse("unparsable address %q", address)
	}
	if ap.Port() == 0 {
		return refuse("address %s: port 0", address)
	}
	return p.CheckAddr(ap.Addr())
}
