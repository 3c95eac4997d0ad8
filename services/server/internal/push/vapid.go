package push

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// VAPIDKeys is an application server key pair (RFC 8292), both halves
// unpadded base64url: the public key is the uncompressed P-256 point that
// browsers take as applicationServerKey, the private key its 32-byte scalar.
type VAPIDKeys struct {
	Public  string
	Private string
}

// GenerateVAPIDKeys makes a new key pair ("bothy push vapid-keys").
func GenerateVAPIDKeys() (VAPIDKeys, error) {
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return VAPIDKeys{}, fmt.Errorf("generate VAPID keys: %w", err)
	}
	return VAPIDKeys{
		Public:  base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes()),
		Private: base64.RawURLEncoding.EncodeToString(priv.Bytes()),
	}, nil
}

// CheckVAPIDKeys reports whether the keys form a pair, naming the
// configuration key at fault. It never includes the private key in errors.
func CheckVAPIDKeys(public, private string) error {
	if public == "" || private == "" {
		return errors.New("push.vapid_public_key and push.vapid_private_key must be set together (bothy push vapid-keys makes a pair)")
	}
	pub, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(public, "="))
	if err != nil {
		return fmt.Errorf("push.vapid_public_key: not base64url: %w", err)
	}
	if _, err := ecdh.P256().NewPublicKey(pub); err != nil {
		return fmt.Errorf("push.vapid_public_key: not an uncompressed P-256 public key (%d bytes)", len(pub))
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(private, "="))
	if err != nil {
		return errors.New("push.vapid_private_key: not base64url")
	}
	priv, err := ecdh.P256().NewPrivateKey(raw)
	if err != nil {
		return fmt.Errorf("push.vapid_private_key: not a P-256 private key (%d bytes, want 32)", len(raw))
	}
	if !bytes.Equal(priv.PublicKey().Bytes(), pub) {
		return errors.New("push.vapid_public_key does not belong to push.vapid_private_key")
	}
	return nil
}
