// Package portallink signs and checks the tokens of console portal links:
// a URL that opens the web console restricted to one principal's webhook
// subscriptions on one space, until it expires. The HTTP API issues them
// (POST /v1/portal-links); the console exchanges one for a session.
//
// A token is base64url(JSON claims) "." base64url(HMAC-SHA256 of the first
// part) under the console key. It is a bearer credential until it expires:
// anyone holding the link can open it, so links are short-lived and meant
// to be made for each page view of the product that embeds them.
package portallink

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
)

// ErrInvalid is returned by Verify for a token that is malformed, not
// signed with the key, or expired. It never says which.
var ErrInvalid = errors.New("invalid or expired portal link")

// Claims is what a portal link grants.
type Claims struct {
	// Principal whose subscriptions the console shows.
	Principal string `json:"p"`
	// Space the console is restricted to.
	Space string `json:"s"`
	// TokenID is the token that issued the link: the session lasts while
	// it stays valid and still manages webhooks on Space.
	TokenID uuid.UUID `json:"t"`
	// Expires ends the link's life (Unix seconds).
	Expires int64 `json:"e"`
	// Nonce makes each link unique, so that two links with the same
	// claims issued in the same second are two links: each opens once.
	Nonce string `json:"n,omitempty"`
}

// Path is the console path that opens a portal link's token.
func Path(token string) string {
	return "/console/portal?" + url.Values{"token": {token}}.Encode()
}

// URL is the portal link of token under base, the console's public
// address (console.public_url): its scheme, host and path prefix.
func URL(base, token string) string {
	return strings.TrimRight(base, "/") + Path(token)
}

// NewNonce returns a random nonce for Claims.Nonce.
func NewNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// Sign returns the token of c under key.
func Sign(key []byte, c *Claims) string {
	raw, _ := json.Marshal(c) // Claims always marshal
	body := base64.RawURLEncoding.EncodeToString(raw)
	return body + "." + base64.RawURLEncoding.EncodeToString(mac(key, body))
}

// Verify checks token under key at now and returns its claims.
func Verify(key []byte, token string, now time.Time) (*Claims, error) {
	// Base64 decoding skips CR and LF even when strict, so a token with
	// them would be another spelling of a valid one.
	if len(token) > 2048 || strings.ContainsAny(token, "\r\n") {
		return nil, ErrInvalid
	}
	body, sig, ok := strings.Cut(token, ".")
	if !ok {
		return nil, ErrInvalid
	}
	got, err := strict.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac(key, body)) {
		return nil, ErrInvalid
	}
	raw, err := strict.DecodeString(body)
	if err != nil {
		return nil, ErrInvalid
	}
	var c Claims
	if err := json.Unmarshal(raw, &c); err != nil || c.Principal == "" || c.Space == "" {
		return nil, ErrInvalid
	}
	if now.Unix() >= c.Expires {
		return nil, ErrInvalid
	}
	return &c, nil
}

// strict refuses encodings with stray bits in the last character, so one
// token has exactly one spelling.
var strict = base64.RawURLEncoding.Strict()

func mac(key []byte, body string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("bothy portal link\x00"))
	m.Write([]byte(body))
	return m.Sum(nil)
}
