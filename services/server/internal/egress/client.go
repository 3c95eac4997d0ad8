package egress

import (
	"net"
	"net/http"
	"syscall"
	"time"
)

// TransportConfig is what differs between the HTTP transports that dial
// user-named addresses: how long a dial, a handshake and the wait for an
// answer's headers may take, how many idle connections are kept, and how
// a refused dial's error is marked for the caller.
type TransportConfig struct {
	// DialTimeout bounds a connection's dial, TLSHandshakeTimeout its
	// TLS handshake after it (0: DialTimeout).
	DialTimeout         time.Duration
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for an answer's headers once
	// the request is written (0: none but the request's own).
	ResponseHeaderTimeout time.Duration
	MaxIdleConns          int
	MaxIdleConnsPerHost   int
	// Refused wraps the error of a dial the policy refused (nil: as is).
	Refused func(error) error
}

// Transport is the one HTTP transport for connections to addresses users
// name: the policy at every dial (Control), no proxy (a proxy would
// connect on bothy's behalf, out of Control's sight), HTTP/2 when offered.
func (p Policy) Transport(c TransportConfig) *http.Transport {
	control := p.Control
	if c.Refused != nil {
		control = func(network, address string, rc syscall.RawConn) error {
			if err := p.Control(network, address, rc); err != nil {
				return c.Refused(err)
			}
			return nil
		}
	}
	d := &net.Dialer{Timeout: c.DialTimeout, KeepAlive: 30 * time.Second, Control: control}
	tls := c.TLSHandshakeTimeout
	if tls == 0 {
		tls = c.DialTimeout
	}
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           c.MaxIdleConns,
		MaxIdleConnsPerHost:    c.MaxIdleConnsPerHost,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    tls,
		ResponseHeaderTimeout:  c.ResponseHeaderTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// Client is the HTTP client over rt for user-named addresses: timeout
// bounds a whole request, and redirects are not followed, since following
// one would send the request somewhere its owner did not name.
func Client(rt http.RoundTripper, timeout time.Duration) *http.Client {
	return &http.Client{
		Transport:     rt,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
