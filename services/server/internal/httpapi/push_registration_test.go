package httpapi_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// TestAPI_PushEndpointOfAnotherPrincipal: presenting another principal's
// endpoint with one's own keys used to take the registration over (the
// owner's list went empty). It is refused with 409 and the owner keeps it.
func TestAPI_PushEndpointOfAnotherPrincipal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.principal(t, "alice", authz.RightRead, "s1", authz.ScopePushManage)
	mallory := b.principal(t, "mallory", authz.RightRead, "s1", authz.ScopePushManage)
	registration := func() string {
		key, err := ecdh.P256().GenerateKey(rand.Reader)
		require.NoError(t, err)
		auth := make([]byte, 16)
		_, _ = rand.Read(auth)
		return fmt.Sprintf(`{"subscription":{"endpoint":"https://push.example.com/send/alice-device","keys":{"p256dh":%q,"auth":%q}}}`,
			base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()), base64.RawURLEncoding.EncodeToString(auth))
	}

	r := b.do(t, "POST", "/v1/push/registrations", alice, registration())
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	id := r.json(t)["id"].(string)

	r = b.do(t, "POST", "/v1/push/registrations", mallory, registration())
	require.Contains(t, r.problem(t, http.StatusConflict), "registered by another principal")
	require.Equal(t, "/v1/problems/conflict", r.json(t)["type"])

	regs := b.do(t, "GET", "/v1/push/registrations", alice, "").json(t)["registrations"].([]any)
	require.Len(t, regs, 1, "alice keeps her device")
	require.Equal(t, id, regs[0].(map[string]any)["id"])
	require.Empty(t, b.do(t, "GET", "/v1/push/registrations", mallory, "").json(t)["registrations"])

	r = b.do(t, "POST", "/v1/push/registrations", alice, registration())
	require.Equal(t, http.StatusCreated, r.status, "the owner may register it again: %s", r.body)
	require.Equal(t, id, r.json(t)["id"])
}
