// Package pushtest plays the two sides of Web Push that bothy does not own:
// the browser's subscription keys (Device) and the push service that
// receives messages (Receiver). The receiver checks the VAPID header (RFC
// 8292) and decrypts every message with the device's private key (RFC 8291
// over RFC 8188 aes128gcm), so tests and the perf/push_handoff load test
// exercise the encryption instead of trusting it.
//
// It is written from the RFCs independently of the sending code, and its
// own test checks it against what github.com/SherClockHolmes/webpush-go
// sends, so a message that decrypts here is one a browser would decrypt.
package pushtest

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
	"math/big"
	"net/http"
	"strings"
	"time"
)

// Device is a browser's side of a push subscription: the key pair whose
// public half is the subscription's p256dh key, and the auth secret.
type Device struct {
	priv *ecdh.PrivateKey
	auth []byte
}

// NewDevice creates fresh subscription keys, as PushManager.subscribe does.
func NewDevice() (*Device, error) {
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	auth := make([]byte, 16)
	if _, err := rand.Read(auth); err != nil {
		return nil, err
	}
	return &Device{priv: priv, auth: auth}, nil
}

// P256dh is the subscription's p256dh key: the uncompressed public point,
// unpadded base64url, as PushSubscription.toJSON gives it.
func (d *Device) P256dh() string {
	return base64.RawURLEncoding.EncodeToString(d.priv.PublicKey().Bytes())
}

// Auth is the subscription's auth secret, unpadded base64url.
func (d *Device) Auth() string { return base64.RawURLEncoding.EncodeToString(d.auth) }

// Decrypt opens an aes128gcm body (RFC 8188) whose key was agreed as RFC
// 8291 describes, and returns the plaintext without padding.
func (d *Device) Decrypt(body []byte) ([]byte, error) {
	// Header: salt (16) | rs (uint32) | idlen (uint8) | keyid (idlen).
	if len(body) < 21 {
		return nil, errors.New("aes128gcm: body shorter than its header")
	}
	salt := body[:16]
	rs := binary.BigEndian.Uint32(body[16:20])
	idlen := int(body[20])
	if rs < 18 {
		return nil, fmt.Errorf("aes128gcm: record size %d below 18", rs)
	}
	if len(body) < 21+idlen {
		return nil, errors.New("aes128gcm: body shorter than its key id")
	}
	// In Web Push the key id is the application server's ephemeral public key.
	asPublic, err := ecdh.P256().NewPublicKey(body[21 : 21+idlen])
	if err != nil {
		return nil, fmt.Errorf("rfc8291: key id is not a P-256 public key: %w", err)
	}
	records := body[21+idlen:]

	secret, err := d.priv.ECDH(asPublic)
	if err != nil {
		return nil, fmt.Errorf("rfc8291: ecdh: %w", err)
	}
	// IKM = HKDF(auth_secret, ecdh_secret, "WebPush: info" || 0x00 || ua_public || as_public, 32)
	info := append([]byte("WebPush: info\x00"), d.priv.PublicKey().Bytes()...)
	info = append(info, asPublic.Bytes()...)
	ikm, err := hkdf.Key(sha256.New, secret, d.auth, string(info), 32)
	if err != nil {
		return nil, err
	}
	cek, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, err
	}
	baseNonce, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: nonce\x00", 12)
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

	var out []byte
	for seq := uint64(0); ; seq++ {
		if len(records) == 0 {
			return nil, errors.New("aes128gcm: no final record")
		}
		n := min(int(rs), len(records))
		rec := records[:n]
		records = records[n:]
		nonce := bytes.Clone(baseNonce)
		var s [8]byte
		binary.BigEndian.PutUint64(s[:], seq)
		for i := range 6 { // the sequence number XORs into the nonce's low 48 bits
			nonce[6+i] ^= s[2+i]
		}
		plain, err := gcm.Open(nil, nonce, rec, nil)
		if err != nil {
			return nil, fmt.Errorf("aes128gcm: record %d: %w", seq, err)
		}
		// Each record ends in a delimiter (1: more follow, 2: last) and zeros.
		end := bytes.LastIndexFunc(plain, func(r rune) bool { return r != 0 })
		if end < 0 {
			return nil, fmt.Errorf("aes128gcm: record %d has no delimiter", seq)
		}
		switch plain[end] {
		case 2:
			if len(records) != 0 {
				return nil, errors.New("aes128gcm: data after the last record")
			}
			return append(out, plain[:end]...), nil
		case 1:
			out = append(out, plain[:end]...)
		default:
			return nil, fmt.Errorf("aes128gcm: record %d: bad delimiter %d", seq, plain[end])
		}
	}
}

// VerifyVAPID checks the Authorization header of a push request (RFC 8292):
// scheme vapid with t= an ES256 JWT signed by the key k=, which must be
// wantPublicKey (base64url), with aud the request's origin, an exp within
// 24 hours and a sub.
func VerifyVAPID(r *http.Request, origin, wantPublicKey string) error {
	_, err := verifyVAPID(r, origin, wantPublicKey)
	return err
}

// verifyVAPID is VerifyVAPID that also returns the token's exp.
func verifyVAPID(r *http.Request, origin, wantPublicKey string) (time.Time, error) {
	h := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(h, "vapid ")
	if !ok {
		return time.Time{}, fmt.Errorf("vapid: authorization scheme is not vapid: %q", h)
	}
	var token, key string
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			token = v
		case "k":
			key = v
		}
	}
	if key != strings.TrimRight(wantPublicKey, "=") {
		return time.Time{}, fmt.Errorf("vapid: k is not the expected public key")
	}
	pub, err := base64.RawURLEncoding.DecodeString(key)
	if err != nil {
		return time.Time{}, fmt.Errorf("vapid: k: %w", err)
	}
	pk, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), pub)
	if err != nil {
		return time.Time{}, errors.New("vapid: k is not a P-256 point")
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, errors.New("vapid: t is not a JWT")
	}
	var head struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		Aud string `json:"aud"`
		Exp int64  `json:"exp"`
		Sub string `json:"sub"`
	}
	if err := decodeJSONPart(parts[0], &head); err != nil || head.Alg != "ES256" {
		return time.Time{}, fmt.Errorf("vapid: JWT header: alg %q, %v", head.Alg, err)
	}
	if err := decodeJSONPart(parts[1], &claims); err != nil {
		return time.Time{}, fmt.Errorf("vapid: JWT claims: %w", err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return time.Time{}, errors.New("vapid: JWT signature is not 64 bytes of base64url")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !ecdsa.Verify(pk, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		return time.Time{}, errors.New("vapid: JWT signature does not verify")
	}
	if claims.Aud != origin {
		return time.Time{}, fmt.Errorf("vapid: aud %q, want %q", claims.Aud, origin)
	}
	exp := time.Unix(claims.Exp, 0)
	if now := time.Now(); exp.Before(now) || exp.After(now.Add(24*time.Hour)) {
		return time.Time{}, fmt.Errorf("vapid: exp %s not within the next 24 hours", exp)
	}
	if !strings.HasPrefix(claims.Sub, "mailto:") && !strings.HasPrefix(claims.Sub, "https:") {
		return time.Time{}, fmt.Errorf("vapid: sub %q has neither the mailto: nor the https: scheme", claims.Sub)
	}
	return exp, nil
}

func decodeJSONPart(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
