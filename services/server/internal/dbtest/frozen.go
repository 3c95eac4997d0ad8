package dbtest

import (
	"net"
	"net/url"
	"strings"
	gosync "sync"
	"testing"
)

// FrozenProxy forwards TCP connections to a PostgreSQL server until Freeze;
// from then on it moves no byte either way and answers no new connection,
// while refusing and resetting nothing: a server whose machine stopped
// answering, as the peer sees it. Connections and listener close when the
// test ends (or at Close).
type FrozenProxy struct {
	ln     net.Listener
	target string
	frozen chan struct{}
	once   gosync.Once
	mu     gosync.Mutex
	conns  []net.Conn
}

// NewFrozenProxy starts a proxy on a loopback port to target (host:port).
func NewFrozenProxy(tb testing.TB, target string) *FrozenProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("dbtest: proxy: %v", err)
	}
	p := &FrozenProxy{ln: ln, target: target, frozen: make(chan struct{})}
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *FrozenProxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops the proxy answering.
func (p *FrozenProxy) Freeze() { p.once.Do(func() { close(p.frozen) }) }

func (p *FrozenProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.keep(c)
		select {
		case <-p.frozen:
			continue // held open, never read
		default:
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.keep(up)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst until either closes or the proxy freezes.
func (p *FrozenProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.frozen:
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *FrozenProxy) keep(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

// Close closes the listener and every connection (the peers then see them
// end). The test's end calls it; call it earlier to let the peers go sooner.
func (p *FrozenProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// WithHosts returns u with its host replaced by hosts (host:port, comma
// separated), as a failover formation's URL lists its nodes.
func WithHosts(tb testing.TB, u, hosts string) string {
	tb.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	pu.Host = hosts
	return pu.String()
}

// HostPort is the host:port of u.
func HostPort(tb testing.TB, u string) string {
	tb.Helper()
	pu, err := url.Parse(u)
	if err != nil || strings.Contains(pu.Host, ",") {
		tb.Fatalf("dbtest: %q is not a single-host URL", u)
	}
	return pu.Host
}
