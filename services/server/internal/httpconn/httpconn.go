// Package httpconn hands a request's network connection to the handlers
// that tune it, such as an event stream bounding its send buffer. The HTTP
// server stores each connection in its context (http.Server.ConnContext
// set to Context); handlers find it with From.
package httpconn

import (
	"context"
	"net"
)

type connKey struct{}

// Context returns ctx carrying c; it is an http.Server's ConnContext.
func Context(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// From returns the connection Context stored in ctx, unwrapped from TLS;
// false when none was stored.
func From(ctx context.Context) (net.Conn, bool) {
	c, ok := ctx.Value(connKey{}).(net.Conn)
	if !ok {
		return nil, false
	}
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = tc.NetConn()
	}
	return c, true
}

// SetWriteBuffer sets the kernel send buffer of ctx's connection to bytes,
// which also stops the kernel from growing it; it reports whether the
// connection was found and takes the setting.
func SetWriteBuffer(ctx context.Context, bytes int) bool {
	c, ok := From(ctx)
	if !ok {
		return false
	}
	b, ok := c.(interface{ SetWriteBuffer(int) error })
	return ok && b.SetWriteBuffer(bytes) == nil
}
