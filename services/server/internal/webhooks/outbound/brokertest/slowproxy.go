package brokertest

import (
	"net"
	gosync "sync"
	"testing"
	"time"
)

// SlowProxy forwards TCP connections to a broker (or receiver) and holds
// each chunk of the broker's replies back for a delay before passing it
// on: a broker whose every confirmation takes that long, so that an
// ordered sender's run of sends lasts long enough for a test to act in its
// middle. Listener and connections close when the test ends.
type SlowProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	mu     gosync.Mutex
	conns  []net.Conn
	closed chan struct{}
}

// NewSlowProxy starts a proxy on a loopback port to target (host:port)
// that delays the broker's replies by delay.
func NewSlowProxy(tb testing.TB, target string, delay time.Duration) *SlowProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("brokertest: slow proxy: %v", err)
	}
	p := &SlowProxy{ln: ln, target: target, delay: delay, closed: make(chan struct{})}
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *SlowProxy) Addr() string { return p.ln.Addr().String() }

func (p *SlowProxy) accept() {
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
		go p.pipe(up, c, 0)
		go p.pipe(c, up, p.delay)
	}
}

// pipe copies src to dst until either closes, each chunk after delay.
func (p *SlowProxy) pipe(dst, src net.Conn, delay time.Duration) {
	defer func() { _ = dst.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && delay > 0 {
			select {
			case <-time.After(delay): // the broker's latency, not a synchronisation
			case <-p.closed:
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

func (p *SlowProxy) close() {
	_ = p.ln.Close()
	close(p.closed)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}
