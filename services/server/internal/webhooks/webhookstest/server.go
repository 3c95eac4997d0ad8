package webhookstest

import (
	"net/http/httptest"
)

// Server is a Receiver served on loopback.
type Server struct {
	*Receiver
	srv *httptest.Server
}

// NewServer serves a new receiver (o may be nil) on 127.0.0.1 until
// Close.
func NewServer(o *Options) *Server {
	s := &Server{Receiver: NewReceiver(o)}
	s.srv = httptest.NewUnstartedServer(s.Receiver)
	s.srv.Config.MaxHeaderBytes = 64 << 10 // room for many custom headers
	s.srv.Start()
	return s
}

// URL is endpoint name's URL; the endpoint is made if it is new.
func (s *Server) URL(name string) string {
	s.Endpoint(name)
	return s.srv.URL + Path(name)
}

// Base is the server's URL without a path.
func (s *Server) Base() string { return s.srv.URL }

// Close releases the held requests and stops the server.
func (s *Server) Close() {
	s.Receiver.Close()
	s.srv.Close()
}
