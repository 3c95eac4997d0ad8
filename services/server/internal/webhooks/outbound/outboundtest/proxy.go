package outboundtest

import (
	"net"
	gosync "sync"
	"testing"
)

// CutProxy forwards TCP connections to a broker (or receiver) and lets a
// test hold back the broker's replies and cut the connections, as a
// network that fails mid-publish does, without touching the broker: Hold
// keeps forwarding what the client sends while the broker's bytes stop
// reaching it (the message arrives, its confirmation does not); Cut closes
// every connection it carries and ends the hold, and new connections are
// forwarded as before. The listener and connections close when the test
// ends.
type CutProxy struct {
	ln     net.Listener
	target string
	mu     gosync.Mutex
	conns  []net.Conn
	held   chan struct{} // closed by Cut; nil while not held
}

// NewCutProxy starts a proxy on a loopback port to target (host:port).
func NewCutProxy(tb testing.TB, target string) *CutProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("outboundtest: proxy: %v", err)
	}
	p := &CutProxy{ln: ln, target: target}
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *CutProxy) Addr() string { return p.ln.Addr().String() }

// Hold stops the broker's bytes reaching the client until Cut.
func (p *CutProxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

// Cut closes every connection the proxy carries and ends a hold.
func (p *CutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

func (p *CutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(up, c, false)
		go p.pipe(c, up, true)
	}
}

// pipe copies src to dst until either closes; the broker's side (reply)
// waits while the proxy holds, and drops what it read when the hold ends
// with a cut.
func (p *CutProxy) pipe(dst, src net.Conn, reply bool) {
	defer func() { _ = dst.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if reply {
			p.mu.Lock()
			h := p.held
			p.mu.Unlock()
			if h != nil {
				<-h
				return
			}
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

func (p *CutProxy) close() {
	_ = p.ln.Close()
	p.Cut()
}
