package outbound

import (
	"net/textproto"
	"strings"
)

// Bounds of one custom header.
const (
	// MaxHeaderNameBytes bounds one header name.
	MaxHeaderNameBytes = 64
	// MaxHeaderValueBytes bounds one header value.
	MaxHeaderValueBytes = 1024
)

// refusedHeaders are the names a subscription may not set, canonical, with
// why. The signature's headers would let a receiver be told another
// message's id or signature; hop-by-hop headers concern one connection, not
// the message (RFC 9110 section 7.6.1), and the transport sets them itself;
// Host, Content-Length and Content-Type describe the request we send and
// are set by the HTTP client. Every Proxy-* name is refused as well.
var refusedHeaders = map[string]string{
	"Webhook-Id":        "it is set by the signature scheme",
	"Webhook-Timestamp": "it is set by the signature scheme",
	"Webhook-Signature": "it is set by the signature scheme",
	"Connection":        "it is a hop-by-hop header",
	"Keep-Alive":        "it is a hop-by-hop header",
	"Te":                "it is a hop-by-hop header",
	"Trailer":           "it is a hop-by-hop header",
	"Transfer-Encoding": "it is a hop-by-hop header",
	"Upgrade":           "it is a hop-by-hop header",
	"Host":              "it is set by the HTTP client from the URL",
	"Content-Length":    "it is set by the HTTP client",
	"Content-Type":      "deliveries are always application/json",
}

// RefusedHeader says why the canonical header name may not be a custom
// header, or "" when it may.
func RefusedHeader(canonical string) string {
	if why, ok := refusedHeaders[canonical]; ok {
		return why
	}
	if strings.HasPrefix(canonical, "Proxy-") {
		return "Proxy-* headers are for proxies, and none is used"
	}
	return ""
}

// tokenChars are the characters of an HTTP field name besides letters and
// digits (RFC 9110 section 5.6.2).
const tokenChars = "!#$%&'*+-.^_`|~"

// ValidHeaderName accepts an HTTP field name (a token) of at most
// MaxHeaderNameBytes.
func ValidHeaderName(name string) bool {
	if name == "" || len(name) > MaxHeaderNameBytes {
		return false
	}
	for _, c := range []byte(name) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(tokenChars, c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// ValidHeaderValue accepts printable ASCII with inner spaces and tabs, of
// at most MaxHeaderValueBytes: no control characters (a CR or LF would let
// a value add headers of its own) and no leading or trailing whitespace,
// which HTTP strips anyway.
func ValidHeaderValue(v string) bool {
	if v == "" || len(v) > MaxHeaderValueBytes || v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t' {
		return false
	}
	for _, c := range []byte(v) {
		if (c < 0x20 && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

// usableHeader returns the canonical name of a stored custom header that
// may go on a request; false for one the store would refuse (a row written
// by hand), which is left out.
func usableHeader(name, v string) (string, bool) {
	if !ValidHeaderName(name) || !ValidHeaderValue(v) {
		return "", false
	}
	c := textproto.CanonicalMIMEHeaderKey(name)
	return c, RefusedHeader(c) == ""
}
