package push

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/push/pushtest"
)

func b64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	require.NoError(t, err)
	return b
}

// TestEncrypt_RFC8291AppendixA pins the framing to the RFC's worked
// example: its keys and salt must give its message, byte for byte.
func TestEncrypt_RFC8291AppendixA(t *testing.T) {
	t.Parallel()
	as, err := ecdh.P256().NewPrivateKey(b64(t, "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"))
	require.NoError(t, err)
	require.Equal(t, b64(t, "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"), as.PublicKey().Bytes())

	got, err := encrypt([]byte("When I grow up, I want to be a watermelon"),
		b64(t, "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"),
		b64(t, "BTBZMqHH6r4Tts7J_aSIgg"), as, b64(t, "DGv6ra1nlYgDCS1FRnbzlw"), 0)
	require.NoError(t, err)
	want := "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
	require.Equal(t, want, base64.RawURLEncoding.EncodeToString(got))
}

// TestSeal_DecryptsWithThePaddingHidingTheLength checks the padded form
// against the independent receiver, for lengths around the pad boundary.
func TestSeal_DecryptsWithThePaddingHidingTheLength(t *testing.T) {
	t.Parallel()
	d, err := pushtest.NewDevice()
	require.NoError(t, err)
	var sizes []int
	for _, n := range []int{0, 1, padBlock - 2, padBlock - 1, padBlock, 3000} {
		msg := bytes.Repeat([]byte{'x'}, n)
		body, err := seal(msg, d.P256dh(), d.Auth())
		require.NoError(t, err, "length %d", n)
		got, err := d.Decrypt(body)
		require.NoError(t, err, "length %d", n)
		require.Equal(t, string(msg), string(got), "length %d", n)
		sizes = append(sizes, len(body))
	}
	require.Equal(t, sizes[0], sizes[3], "lengths 0 and padBlock-1 must look alike on the wire")
	require.Less(t, sizes[3], sizes[4], "length padBlock needs the next block (with its delimiter)")

	_, err = seal(make([]byte, 4000), d.P256dh(), d.Auth())
	require.ErrorContains(t, err, "does not fit")
	_, err = seal([]byte("x"), "AAAA", d.Auth())
	require.ErrorContains(t, err, "p256dh")
}

// TestVAPIDSigner_ReusesTheTokenPerOrigin checks the header against the
// independent verifier and that one token serves an origin until it is
// due for renewal, while another origin gets its own.
func TestVAPIDSigner_ReusesTheTokenPerOrigin(t *testing.T) {
	t.Parallel()
	keys, err := GenerateVAPIDKeys()
	require.NoError(t, err)
	now := time.Now()
	v, err := newVAPIDSigner(keys.Public, keys.Private, "mailto:ops@bothy.invalid", func() time.Time { return now })
	require.NoError(t, err)

	verify := func(endpoint, header string) error {
		req, err := http.NewRequest(http.MethodPost, endpoint, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", header)
		origin := endpoint[:strings.Index(endpoint[len("https://"):], "/")+len("https://")]
		return pushtest.VerifyVAPID(req, origin, keys.Public)
	}
	a1, err := v.authorization("https://push.example.net/send/a")
	require.NoError(t, err)
	require.NoError(t, verify("https://push.example.net/send/a", a1))
	a2, err := v.authorization("https://push.example.net/send/b")
	require.NoError(t, err)
	require.Equal(t, a1, a2, "same origin: same token")
	b1, err := v.authorization("https://other.example.org/x")
	require.NoError(t, err)
	require.NotEqual(t, a1, b1)
	require.NoError(t, verify("https://other.example.org/x", b1))
	require.Error(t, verify("https://other.example.org/x", a1), "a token is bound to its origin")

	now = now.Add(vapidTokenReuse - time.Second)
	a3, err := v.authorization("https://push.example.net/send/a")
	require.NoError(t, err)
	require.Equal(t, a1, a3, "still fresh")
	now = now.Add(2 * time.Second)
	a4, err := v.authorization("https://push.example.net/send/a")
	require.NoError(t, err)
	require.NotEqual(t, a1, a4, "renewed once it is due")
}

func TestVAPIDSigner_CacheStaysBounded(t *testing.T) {
	t.Parallel()
	keys, err := GenerateVAPIDKeys()
	require.NoError(t, err)
	v, err := newVAPIDSigner(keys.Public, keys.Private, "mailto:ops@bothy.invalid", time.Now)
	require.NoError(t, err)
	for i := range maxVAPIDOrigins + 10 {
		_, err := v.authorization(fmt.Sprintf("https://push%d.example.net/x", i))
		require.NoError(t, err)
	}
	require.LessOrEqual(t, len(v.tokens), maxVAPIDOrigins)
}
