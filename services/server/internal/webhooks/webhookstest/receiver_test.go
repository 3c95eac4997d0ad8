package webhookstest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// event is seq's event, with an id of its own per seq.
func event(seq int64) *sync.Event {
	return &sync.Event{Seq: seq, ID: uuid.NewSHA1(uuid.Nil, fmt.Appendf(nil, "%d", seq)), Space: "s1", Type: "item.created",
		Actor: "a", OccurredAt: time.Now(), Data: json.RawMessage(`{}`)}
}

// send posts m to url signed by the project's own signer with secret.
func send(t *testing.T, url, secret string, m *outbound.Message) *http.Response {
	t.Helper()
	req, err := outbound.NewRequest(context.Background(), &outbound.Target{URL: url, Secret: secret}, m, time.Now())
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

func single(t *testing.T, seq int64) *outbound.Message {
	m, err := outbound.SingleMessage(event(seq))
	require.NoError(t, err)
	return &m
}

func TestReceiver_VerifiesTheProjectsSignature(t *testing.T) {
	s := recvtest.Start(t, nil)
	good, bad := s.Endpoint("good"), s.Endpoint("bad")
	require.NoError(t, good.SetSecret(secret))
	require.NoError(t, bad.SetSecret("whsec_"+"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"))
	send(t, s.URL("good"), secret, single(t, 1))
	send(t, s.URL("bad"), secret, single(t, 1))
	a := good.Arrivals()
	require.Len(t, a, 1)
	require.NoError(t, a[0].SigErr)
	require.True(t, a[0].Verified)
	require.Equal(t, single(t, 1).ID, a[0].ID)
	require.Equal(t, int64(1), a[0].Seq)
	require.Equal(t, 1, a[0].Attempt)
	require.Equal(t, http.StatusOK, a[0].Status)
	require.Equal(t, "application/json", a[0].Header.Get("Content-Type"))
	require.Error(t, bad.Arrivals()[0].SigErr)
	require.False(t, bad.Arrivals()[0].Verified)

	strict := s.Endpoint("strict")
	strict.SetRule(webhookstest.Verified(nil))
	require.Equal(t, http.StatusUnauthorized, send(t, s.URL("strict"), secret, single(t, 1)).StatusCode, "no secret yet: nothing verifies")
	require.NoError(t, strict.SetSecret(secret))
	require.Equal(t, http.StatusOK, send(t, s.URL("strict"), secret, single(t, 1)).StatusCode)
	require.Equal(t, 0, good.BadSignatures())
	require.Equal(t, 1, bad.BadSignatures())
}

func TestReceiver_AnswersByRule(t *testing.T) {
	s := recvtest.Start(t, nil)
	ep := s.Endpoint("")
	ep.SetRule(webhookstest.FailFirst(2, webhookstest.RetryAfter(http.StatusServiceUnavailable, 1500*time.Millisecond)))
	for want := range []int{503, 503, 200} {
		resp := send(t, s.URL(""), secret, single(t, 7))
		require.Equal(t, []int{503, 503, 200}[want], resp.StatusCode)
		if resp.StatusCode == 503 {
			require.Equal(t, "2", resp.Header.Get("Retry-After"))
		}
	}
	as := ep.Arrivals()
	require.Equal(t, []int{1, 2, 3}, []int{as[0].Attempt, as[1].Attempt, as[2].Attempt})
	require.Empty(t, ep.Repeats(), "retries after failures are no repeats")
	ep.SetRule(webhookstest.Always(webhookstest.Gone))
	require.Equal(t, http.StatusGone, send(t, s.URL(""), secret, single(t, 8)).StatusCode)
}

func TestReceiver_HangsUntilTheSenderGivesUpOrARelease(t *testing.T) {
	s := recvtest.Start(t, nil)
	ep := s.Endpoint("")
	ep.SetRule(webhookstest.Always(webhookstest.Answer{Hang: true, Status: http.StatusAccepted}))
	ctx, cancel := context.WithCancel(context.Background())
	req, err := outbound.NewRequest(ctx, &outbound.Target{URL: s.URL(""), Secret: secret}, single(t, 1), time.Now())
	require.NoError(t, err)
	gaveUp := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gaveUp <- err
	}()
	recvtest.Count(t, ep, 1)
	cancel()
	require.Error(t, <-gaveUp)
	recvtest.Until(t, recvtest.Wait, ep, func(as []webhookstest.Arrival) bool { return !as[0].Answered.IsZero() }, "given up")
	require.Equal(t, 0, ep.Arrivals()[0].Status, "no answer once the sender gave up")

	answered := make(chan int, 1)
	go func() { answered <- send(t, s.URL(""), secret, single(t, 2)).StatusCode }()
	recvtest.Count(t, ep, 2)
	now, top := ep.InFlight()
	require.Equal(t, 1, now)
	require.Equal(t, 1, top)
	ep.Release()
	require.Equal(t, http.StatusAccepted, <-answered)
}

func TestReceiver_TellsRepeatsOverlapsAndDisorder(t *testing.T) {
	s := recvtest.Start(t, nil)
	ep := s.Endpoint("")
	send(t, s.URL(""), secret, single(t, 1))
	send(t, s.URL(""), secret, single(t, 3))
	send(t, s.URL(""), secret, single(t, 2)) // after 3 was delivered
	send(t, s.URL(""), secret, single(t, 3)) // again after its 2xx
	require.Equal(t, []int64{2}, ep.OutOfOrder(), "3 again is a repeat, not out of order")
	require.Equal(t, []int64{3}, ep.Repeats())
	require.Equal(t, []int64{1, 3, 2}, ep.Delivered())

	ep.SetRule(webhookstest.Always(webhookstest.Answer{Hang: true}))
	done := make(chan struct{})
	go func() { send(t, s.URL(""), secret, single(t, 9)); close(done) }()
	recvtest.Count(t, ep, 5)
	ep.SetRule(nil)
	send(t, s.URL(""), secret, single(t, 9))
	require.Equal(t, []int64{9}, ep.Overlaps(), "9 came again while its first request was held")
	ep.Release()
	<-done
}

func TestReceiver_ReadsBatchesAndAcceptsMessagesFromBrokers(t *testing.T) {
	s := recvtest.Start(t, nil)
	ep := s.Endpoint("b")
	require.NoError(t, ep.SetSecret(secret))
	m, err := outbound.BatchMessage(uuid.New(), []*sync.Event{event(4), event(5), event(6)})
	require.NoError(t, err)
	send(t, s.URL("b"), secret, &m)
	a := ep.Arrivals()[0]
	require.True(t, a.Batch)
	require.Equal(t, []int64{4, 5, 6}, a.Seqs())
	require.NoError(t, a.SigErr)

	one := single(t, 7)
	h, err := outbound.Signed(&outbound.Target{Secret: secret}, one, time.Now())
	require.NoError(t, err)
	hdr := http.Header{}
	for k, v := range h {
		hdr.Set(k, v)
	}
	got := s.Accept("b", hdr, one.Body)
	require.NoError(t, got.SigErr)
	require.Equal(t, []int64{4, 5, 6, 7}, ep.Delivered())
}

func TestReceiver_LeanKeepsNoBodies(t *testing.T) {
	s := recvtest.Start(t, &webhookstest.Options{Lean: true})
	send(t, s.URL("x"), secret, single(t, 1))
	a := s.Endpoint("x").Arrivals()[0]
	require.Nil(t, a.Body)
	require.Nil(t, a.Header)
	require.Nil(t, a.Events[0].Data)
	require.Equal(t, int64(1), a.Seq)
}

func TestReceiver_EveryPathIsAnEndpoint(t *testing.T) {
	s := recvtest.Start(t, nil)
	s.Endpoint("other").SetRule(webhookstest.Always(webhookstest.Answer{Status: http.StatusTeapot, Body: "<b>teapot</b>"}))
	for _, path := range []string{"/", "/hook", "/hook/", "/other", "/hook/other", "/hooked"} {
		resp, err := http.Post(s.Base()+path, "application/json", nil)
		require.NoError(t, err)
		resp.Body.Close()
	}
	require.Equal(t, []string{"other", "", "hooked"}, s.Endpoints())
	require.Equal(t, 3, s.Endpoint("").Count())
	require.Equal(t, 2, s.Endpoint("other").Count())
	resp, err := http.Post(s.Base()+"/other", "application/json", nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusTeapot, resp.StatusCode)
	require.Equal(t, "<b>teapot</b>", string(body))
}
