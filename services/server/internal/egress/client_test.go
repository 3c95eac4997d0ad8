package egress

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTransport_RefusesAtTheDial: a loopback receiver is refused at the
// dial with the caller's mark unless private targets are allowed.
func TestTransport_RefusesAtTheDial(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	mark := errors.New("marked")
	cfg := TransportConfig{DialTimeout: 5 * time.Second, Refused: func(err error) error { return errors.Join(mark, err) }}

	_, err := Client(Policy{}.Transport(cfg), 5*time.Second).Get(srv.URL)
	require.ErrorIs(t, err, mark)
	require.ErrorIs(t, err, ErrPrivate)

	resp, err := Client(Policy{AllowPrivate: true}.Transport(cfg), 5*time.Second).Get(srv.URL)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
}

// TestClient_DoesNotFollowRedirects: a redirect is the answer, not a
// request to where it points.
func TestClient_DoesNotFollowRedirects(t *testing.T) {
	followed := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/elsewhere", func(http.ResponseWriter, *http.Request) { followed <- struct{}{} })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	resp, err := Client(Policy{AllowPrivate: true}.Transport(TransportConfig{DialTimeout: 5 * time.Second}), 5*time.Second).Get(srv.URL)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Empty(t, followed)
}
