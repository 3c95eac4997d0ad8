package brokertest

import (
	"net"
	gosync "sync"
	"testing"
)

// Proxy forwards TCP connections to a broker until it is cut. Cut closes
// every connection it carries and closes each new one at once, as a
// broker that went away does, until Restore; CutOnReply cuts as the
// broker's next bytes arrive, before passing them on, so the request they
// answer reached the broker and its answer is lost. A test never restarts
// the machine's brokers; it cuts a proxy. Connections and listener close
// when the test ends.
type Proxy struct {
	ln     net.Listener
	target string

	mu      gosync.Mutex
	conns   map[net.Conn]struct{}
	cut     bool
	onReply bool
	cuts    chan struct{} // one value per cut
}

// NewProxy starts a proxy on a loopback port to target (host:port).
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("brokertest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, cuts: make(chan struct{}, 16)}
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection now and every new one until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutLocked()
}

// CutOnReply arms the proxy: the next bytes the broker sends on any
// connection are dropped and the proxy cuts, as Cut.
func (p *Proxy) CutOnReply() {
	p.mu.Lock()
	p.onReply = true
	p.mu.Unlock()
}

// Cuts receives a value each time the proxy cuts.
func (p *Proxy) Cuts() <-chan struct{} { return p.cuts }

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut, p.onReply = false, false
	p.mu.Unlock()
}

func (p *Proxy) cutLocked() {
	p.cut, p.onReply = true, false
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
	select {
	case p.cuts <- struct{}{}:
	default:
	}
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.keep(c, up) {
			continue
		}
		go p.pipe(up, c, false)
		go p.pipe(c, up, true)
	}
}

// keep records a client connection and its broker connection, unless the
// proxy was cut meanwhile (then both are closed).
func (p *Proxy) keep(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		_ = c.Close()
		_ = up.Close()
		return false
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	return true
}

// pipe copies src to dst until either closes; fromBroker is true for the
// broker's side, whose bytes CutOnReply watches for.
func (p *Proxy) pipe(dst, src net.Conn, fromBroker bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if fromBroker && p.onReply {
				p.cutLocked()
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Cut()
}
