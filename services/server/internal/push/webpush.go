package push

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	gosync "sync"
	"time"
)

// This file is the sending half of Web Push: RFC 8291 message encryption
// (over RFC 8188 aes128gcm) and RFC 8292 VAPID. It replaces
// github.com/SherClockHolmes/webpush-go in the delivery path because that
// library signs a new VAPID token, and derives the VAPID public point again,
// for every message, a cost that showed in the push load test. The cryptography is the standard
// library's; what is here is the framing, pinned to RFC 8291's Appendix A
// example byte for byte. pushtest's receiver decrypts both this and what
// webpush-go sends.

// recordSize is the aes128gcm record size announced in the header. A
// message is one record; 4096 is what push services accept at most and
// what RFC 8291's example uses.
const recordSize = 4096

// padBlock rounds the plaintext up to a multiple of this many bytes, so the
// length on the wire tells a push service little about a payload whose
// space name and event type vary in length.
const padBlock = 128

// encrypt seals plaintext for the subscription keys uaPublic (p256dh) and
// authSecret (auth) with the ephemeral application server key as and salt,
// padding with zeros up to a multiple of padTo bytes (0: no padding). It
// returns the whole aes128gcm body: salt | rs | idlen | as_public | record.
func encrypt(plaintext, uaPublic, authSecret []byte, as *ecdh.PrivateKey, salt []byte, padTo int) ([]byte, error) {
	ua, err := ecdh.P256().NewPublicKey(uaPublic)
	if err != nil {
		return nil, fmt.Errorf("rfc8291: p256dh is not a P-256 public key: %w", err)
	}
	secret, err := as.ECDH(ua)
	if err != nil {
		return nil, fmt.Errorf("rfc8291: ecdh: %w", err)
	}
	asPublic := as.PublicKey().Bytes()
	// IKM = HKDF(salt=auth_secret, ikm=ecdh_secret, info="WebPush: info\0" | ua_public | as_public, 32)
	info := make([]byte, 0, 14+2*65)
	info = append(append(append(info, "WebPush: info\x00"...), uaPublic...), asPublic...)
	ikm, err := hkdf.Key(sha256.New, secret, authSecret, string(info), 32)
	if err != nil {
		return nil, err
	}
	cek, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, err
	}
	nonce, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	// The record: plaintext, the last-record delimiter 2, then zeros.
	n := len(plaintext) + 1
	if padTo > 0 {
		n = (n + padTo - 1) / padTo * padTo
	}
	header := 16 + 4 + 1 + len(asPublic)
	if header+n+gcm.Overhead() > recordSize {
		return nil, fmt.Errorf("rfc8291: payload of %d bytes does not fit one %d-byte record", len(plaintext), recordSize)
	}
	record := make([]byte, n)
	copy(record, plaintext)
	record[len(plaintext)] = 2

	body := make([]byte, header, header+n+gcm.Overhead())
	copy(body, salt)
	binary.BigEndian.PutUint32(body[16:20], recordSize)
	body[20] = byte(len(asPublic))
	copy(body[21:], asPublic)
	// One record: sequence number 0, so the nonce is the derived one as is.
	return gcm.Seal(body, nonce, record, nil), nil
}

// seal encrypts plaintext for a subscription with a fresh ephemeral key
// and salt, as every message must have.
func seal(plaintext []byte, p256dh, auth string) ([]byte, error) {
	ua, err := base64.RawURLEncoding.DecodeString(p256dh)
	if err != nil {
		return nil, fmt.Errorf("rfc8291: p256dh: %w", err)
	}
	secret, err := base64.RawURLEncoding.DecodeString(auth)
	if err != nil {
		return nil, fmt.Errorf("rfc8291: auth: %w", err)
	}
	as, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	return encrypt(plaintext, ua, secret, as, salt, padBlock)
}

// vapidTokenLife is the exp of a VAPID token: RFC 8292 allows at most 24
// hours. vapidTokenReuse is how long one is sent before a new one is
// signed, so every token sent has at least 6 hours left.
const (
	vapidTokenLife  = 12 * time.Hour
	vapidTokenReuse = 6 * time.Hour
)

// vapidSigner makes the Authorization header of RFC 8292 and reuses it per
// push service origin (the token's aud) while it is fresh: a token is
// valid for any request to its origin until its exp, so push services see
// the same one for hours and signing stays out of the per-message cost.
// It is safe for concurrent use.
type vapidSigner struct {
	key     *ecdsa.PrivateKey
	k       string // the public key as sent in k=
	subject string
	now     func() time.Time

	mu     gosync.Mutex
	tokens map[string]vapidToken // by aud
}

type vapidToken struct {
	header string
	signed time.Time
}

// newVAPIDSigner takes keys that CheckVAPIDKeys accepted.
func newVAPIDSigner(public, private, subject string, now func() time.Time) (*vapidSigner, error) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(private, "="))
	if err != nil {
		return nil, errors.New("push.vapid_private_key: not base64url")
	}
	key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), raw)
	if err != nil {
		return nil, errors.New("push.vapid_private_key: not a P-256 private key")
	}
	return &vapidSigner{key: key, k: strings.TrimRight(public, "="), subject: subject, now: now, tokens: map[string]vapidToken{}}, nil
}

// authorization returns "vapid t=<JWT>, k=<public key>" for endpoint's
// origin.
func (v *vapidSigner) authorization(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return "", errors.New("vapid: endpoint is not an absolute URL")
	}
	aud := u.Scheme + "://" + u.Host
	now := v.now()
	v.mu.Lock()
	t, ok := v.tokens[aud]
	v.mu.Unlock()
	if ok && now.Sub(t.signed) < vapidTokenReuse && !now.Before(t.signed) {
		return t.header, nil
	}
	jwt, err := v.sign(aud, now.Add(vapidTokenLife))
	if err != nil {
		return "", err
	}
	t = vapidToken{header: "vapid t=" + jwt + ", k=" + v.k, signed: now}
	v.mu.Lock()
	if len(v.tokens) >= maxVAPIDOrigins {
		// Real push services are a handful (one per browser vendor); this
		// many origins means registrations point elsewhere, and the cache
		// must not grow with them.
		clear(v.tokens)
	}
	v.tokens[aud] = t
	v.mu.Unlock()
	return t.header, nil
}

// maxVAPIDOrigins bounds the token cache.
const maxVAPIDOrigins = 256

var jwtHeaderES256 = base64.RawURLEncoding.EncodeToString([]byte(`{"typ":"JWT","alg":"ES256"}`))

// sign makes the ES256 JWT: header, claims {aud, exp, sub}, and the
// signature as r | s, 32 bytes each (RFC 7518 section 3.4).
func (v *vapidSigner) sign(aud string, exp time.Time) (string, error) {
	claims, err := json.Marshal(struct {
		Aud string `json:"aud"`
		Exp int64  `json:"exp"`
		Sub string `json:"sub"`
	}{aud, exp.Unix(), v.subject})
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	b.WriteString(jwtHeaderES256)
	b.WriteByte('.')
	b.WriteString(base64.RawURLEncoding.EncodeToString(claims))
	digest := sha256.Sum256(b.Bytes())
	r, s, err := ecdsa.Sign(rand.Reader, v.key, digest[:])
	if err != nil {
		return "", fmt.Errorf("vapid: sign: %w", err)
	}
	var sig [64]byte
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	b.WriteByte('.')
	b.WriteString(base64.RawURLEncoding.EncodeToString(sig[:]))
	return b.String(), nil
}
