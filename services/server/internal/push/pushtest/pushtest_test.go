package pushtest_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"testing"

	webpush "github.com/SherClockHolmes/webpush-go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/push/pushtest"
)

func vapidKeys(t *testing.T) (pub, priv string) {
	t.Helper()
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	require.NoError(t, err)
	return base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes()), base64.RawURLEncoding.EncodeToString(k.Bytes())
}

func TestReceiver_DecryptsWhatWebpushGoSends(t *testing.T) {
	t.Parallel()
	pub, priv := vapidKeys(t)
	rcv := pushtest.NewReceiver(&pushtest.ReceiverConfig{VAPIDPublicKey: pub})
	t.Cleanup(rcv.Close)
	d, endpoint, err := rcv.AddDevice("d1")
	require.NoError(t, err)

	for _, msg := range []string{`{"space":"s1","seq":7}`, "", string(make([]byte, 3000))} {
		resp, err := webpush.SendNotificationWithContext(context.Background(), []byte(msg),
			&webpush.Subscription{Endpoint: endpoint, Keys: webpush.Keys{P256dh: d.P256dh(), Auth: d.Auth()}},
			&webpush.Options{Subscriber: "ops@bothy.invalid", TTL: 60, Urgency: webpush.UrgencyHigh, VAPIDPublicKey: pub, VAPIDPrivateKey: priv})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, "errors: %v", rcv.Errors())
		msgs := rcv.Messages()
		require.Equal(t, msg, string(msgs[len(msgs)-1].Payload))
		require.Equal(t, "high", msgs[len(msgs)-1].Header.Get("Urgency"))
	}
}

func TestReceiver_RefusesWrongKeys(t *testing.T) {
	t.Parallel()
	pub, priv := vapidKeys(t)
	otherPub, _ := vapidKeys(t)

	t.Run("OtherDeviceKeysDoNotDecrypt", func(t *testing.T) {
		t.Parallel()
		rcv := pushtest.NewReceiver(&pushtest.ReceiverConfig{VAPIDPublicKey: pub})
		t.Cleanup(rcv.Close)
		_, endpoint, err := rcv.AddDevice("d1")
		require.NoError(t, err)
		other, err := pushtest.NewDevice()
		require.NoError(t, err)
		resp, err := webpush.SendNotificationWithContext(context.Background(), []byte("x"),
			&webpush.Subscription{Endpoint: endpoint, Keys: webpush.Keys{P256dh: other.P256dh(), Auth: other.Auth()}},
			&webpush.Options{Subscriber: "ops@bothy.invalid", TTL: 60, VAPIDPublicKey: pub, VAPIDPrivateKey: priv})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Len(t, rcv.Errors(), 1)
	})
	t.Run("OtherVAPIDKeyIsRefused", func(t *testing.T) {
		t.Parallel()
		rcv := pushtest.NewReceiver(&pushtest.ReceiverConfig{VAPIDPublicKey: otherPub})
		t.Cleanup(rcv.Close)
		d, endpoint, err := rcv.AddDevice("d1")
		require.NoError(t, err)
		resp, err := webpush.SendNotificationWithContext(context.Background(), []byte("x"),
			&webpush.Subscription{Endpoint: endpoint, Keys: webpush.Keys{P256dh: d.P256dh(), Auth: d.Auth()}},
			&webpush.Options{Subscriber: "ops@bothy.invalid", TTL: 60, VAPIDPublicKey: pub, VAPIDPrivateKey: priv})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	})
}
