package portallink_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/console/portallink"
)

var key = []byte("portal-link-test-key-0123456789abcdef")

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	c := &portallink.Claims{Principal: "carol", Space: "acme", TokenID: uuid.New(), Expires: now.Add(time.Minute).Unix()}
	token := portallink.Sign(key, c)

	t.Run("AcceptsItsOwnUntilItExpires", func(t *testing.T) {
		t.Parallel()
		got, err := portallink.Verify(key, token, now)
		require.NoError(t, err)
		require.Equal(t, c, got)
		_, err = portallink.Verify(key, token, now.Add(time.Minute))
		require.ErrorIs(t, err, portallink.ErrInvalid)
	})
	t.Run("RefusesOtherKeysAndChanges", func(t *testing.T) {
		t.Parallel()
		_, err := portallink.Verify([]byte("another-key-another-key-another-key"), token, now)
		require.ErrorIs(t, err, portallink.ErrInvalid)
		body, sig, _ := strings.Cut(token, ".")
		other := *c
		other.Space = "globex"
		otherBody, _, _ := strings.Cut(portallink.Sign(key, &other), ".")
		// The signature's last character carries 4 bits and 2 unused ones;
		// another spelling of the same bytes is refused too.
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		last := strings.IndexByte(alphabet, token[len(token)-1])
		respelled := token[:len(token)-1] + string(alphabet[last^1])
		// Base64 decoding skips CR and LF, so these decode to the same
		// signature: a used link would open again under them.
		withNewlines := []string{token + "\n", body + ".\r\n" + sig, token[:len(token)-1] + "\n" + token[len(token)-1:]}
		for _, bad := range append([]string{otherBody + "." + sig, body + "." + sig[:len(sig)-1], body, "", "." + sig, body + ".", token + "x", respelled},
			withNewlines...) {
			_, err := portallink.Verify(key, bad, now)
			require.ErrorIs(t, err, portallink.ErrInvalid, bad)
		}
	})
}

// FuzzVerify: whatever a client sends as a portal token, Verify does not
// panic, and the only token it accepts is the one signed with the key.
func FuzzVerify(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	good := portallink.Sign(key, &portallink.Claims{Principal: "carol", Space: "acme", Expires: now.Add(time.Hour).Unix()})
	for _, s := range []string{good, "", ".", "a.b", good + good, strings.Repeat("A", 3000), good + "\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		if _, err := portallink.Verify(key, token, now); err == nil && token != good {
			t.Fatalf("accepted a token the key did not sign: %q", token)
		}
	})
}

func TestURL(t *testing.T) {
	t.Parallel()
	require.Equal(t, "/console/portal?token=a.b%2Bc", portallink.Path("a.b+c"))
	for _, base := range []string{"https://x.example/p", "https://x.example/p/"} {
		require.Equal(t, "https://x.example/p/console/portal?token=t", portallink.URL(base, "t"))
	}
}
