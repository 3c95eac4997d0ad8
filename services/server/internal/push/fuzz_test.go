package push

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
)

// fuzzSeeds returns registrations to start from: a valid one and variants.
func fuzzSeeds(f *testing.F) [][4]string {
	d, err := pushtest.NewDevice()
	if err != nil {
		f.Fatal(err)
	}
	dh, auth := d.P256dh(), d.Auth()
	raw, _ := base64.RawURLEncoding.DecodeString(dh)
	return [][4]string{
		{"alice", "https://push.example.net/send/abc", dh, auth},
		{"alice", "http://127.0.0.1:9/push/x", dh, auth},
		{"alice", "https://10.0.0.1/x", dh, auth},
		{"alice", "https://localhost/x", dh, auth},
		{"alice", "https://u:p@push.example.net/x", dh, auth},
		{"alice", "https://push.example.net/x#f", dh, auth},
		{"alice", "ftp://push.example.net/x", dh, auth},
		{"alice", "https:///x", dh, auth},
		{"alice", "https://push.example.net/" + strings.Repeat("a", 2100), dh, auth},
		{"", "https://push.example.net/x", dh, auth},
		{"bad name", "https://push.example.net/x", dh, auth},
		{"alice", "https://push.example.net/x", base64.StdEncoding.EncodeToString(raw), auth + "=="},
		{"alice", "https://push.example.net/x", dh[:20], auth},
		{"alice", "https://push.example.net/x", dh, auth[:10]},
		{"alice", "https://push.example.net/x", "", ""},
		{"alice", "https://push.example.net/x", "!!!", "\x00"},
		{"alice", "https://[::ffff:10.0.0.1]/x", dh, auth},
		{"alice", "https://[64:ff9b::7f00:1]/x", dh, auth},
	}
}

// FuzzValidate validates fuzzed registrations: never a panic, every refusal
// wraps ErrInvalidRegistration, and what is accepted is https (or http with
// private targets allowed) with keys of the right size in unpadded base64url.
func FuzzValidate(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s[0], s[1], s[2], s[3], "ua", false)
		f.Add(s[0], s[1], s[2], s[3], strings.Repeat("u", 600), true)
	}
	f.Fuzz(func(t *testing.T, principal, endpoint, p256dh, auth, ua string, allowPrivate bool) {
		reg := NewRegistry(&RegistryConfig{AllowPrivateTargets: allowPrivate})
		var s Subscription
		s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, p256dh, auth
		out, err := reg.Validate(&RegisterParams{Principal: principal, Subscription: s, UserAgent: ua})
		if err != nil {
			if !errors.Is(err, ErrInvalidRegistration) {
				t.Fatalf("refusal does not wrap ErrInvalidRegistration: %v", err)
			}
			return
		}
		if !strings.HasPrefix(out.Endpoint, "https://") && !(allowPrivate && strings.HasPrefix(out.Endpoint, "http://")) {
			t.Fatalf("accepted endpoint %q", out.Endpoint)
		}
		dh, err1 := base64.RawURLEncoding.DecodeString(out.Keys.P256dh)
		au, err2 := base64.RawURLEncoding.DecodeString(out.Keys.Auth)
		if err1 != nil || err2 != nil || len(dh) != 65 || len(au) != 16 {
			t.Fatalf("accepted keys are not canonical: %q %q", out.Keys.P256dh, out.Keys.Auth)
		}
		if len(ua) > 512 {
			t.Fatalf("accepted a user agent of %d bytes", len(ua))
		}
	})
}

// FuzzRegister registers fuzzed devices on a real database: a refusal is
// ErrInvalidRegistration and writes nothing.
func FuzzRegister(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s[0], s[1], s[2], s[3], false)
		f.Add(s[0], s[1], s[2], s[3], true)
	}
	db := dbtest.NewDB(f)
	ctx := context.Background()
	count := func(t *testing.T) int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM push_registrations`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	f.Fuzz(func(t *testing.T, principal, endpoint, p256dh, auth string, allowPrivate bool) {
		reg := NewRegistry(&RegistryConfig{AllowPrivateTargets: allowPrivate})
		var s Subscription
		s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, p256dh, auth
		before := count(t)
		r, err := reg.Register(ctx, db.Pool, &RegisterParams{Principal: principal, Subscription: s})
		after := count(t)
		if err != nil {
			if !errors.Is(err, ErrInvalidRegistration) {
				t.Fatalf("principal %q endpoint %q: not a validation error: %v", principal, endpoint, err)
			}
			if after != before {
				t.Fatalf("refused registration changed the table: %d -> %d rows", before, after)
			}
			return
		}
		if after < before || after > before+1 {
			t.Fatalf("one registration changed the table by %d rows", after-before)
		}
		if _, err := db.Pool.Exec(ctx, `DELETE FROM push_registrations WHERE id = $1`, r.ID); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzSeal encrypts fuzzed payloads for a real device and fuzzed keys:
// never a panic; with the device's keys every payload that fits one record
// decrypts to itself, and with other keys sealing fails or the device
// cannot open it.
func FuzzSeal(f *testing.F) {
	d, err := pushtest.NewDevice()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range fuzzSeeds(f) {
		f.Add([]byte(`{"space":"s1","seq":7}`), s[2], s[3])
	}
	f.Add([]byte{}, d.P256dh(), d.Auth())
	f.Add(make([]byte, 3900), d.P256dh(), d.Auth())
	f.Fuzz(func(t *testing.T, payload []byte, p256dh, auth string) {
		if body, err := seal(payload, d.P256dh(), d.Auth()); err == nil {
			got, err := d.Decrypt(body)
			if err != nil {
				t.Fatalf("own keys: %v", err)
			}
			if string(got) != string(payload) {
				t.Fatalf("own keys: decrypted %d bytes, sealed %d", len(got), len(payload))
			}
		} else if len(payload) < 3900 {
			t.Fatalf("a %d-byte payload must fit: %v", len(payload), err)
		}
		body, err := seal(payload, p256dh, auth)
		if err != nil {
			return
		}
		if p256dh == d.P256dh() && auth == d.Auth() {
			return
		}
		if _, err := d.Decrypt(body); err == nil {
			t.Fatal("a message sealed for other keys opened with the device's")
		}
	})
}
