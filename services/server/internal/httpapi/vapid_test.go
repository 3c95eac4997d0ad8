package httpapi_test

import (
	"net/http"
	"testing"

	webpush "github.com/SherClockHolmes/webpush-go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// TestAPI_VAPIDPublicKey: the push module's public route answers the key
// once push is configured, and 404 before.
func TestAPI_VAPIDPublicKey(t *testing.T) {
	t.Parallel()
	t.Run("NotConfiguredIs404", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.do(t, "GET", "/v1/push/vapid-public-key", "", "")
		require.Contains(t, r.problem(t, http.StatusNotFound), "push.vapid_public_key")
	})
	t.Run("ConfiguredAnswersTheKey", func(t *testing.T) {
		t.Parallel()
		private, public, err := webpush.GenerateVAPIDKeys()
		require.NoError(t, err)
		db := dbtest.NewDB(t)
		b := &testBundle{db: db, base: startServer(t, db.URL, "api",
			"push.vapid_public_key", public, "push.vapid_private_key", private)}
		r := b.do(t, "GET", "/v1/push/vapid-public-key", "", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, public, r.json(t)["public_key"])
	})
}
