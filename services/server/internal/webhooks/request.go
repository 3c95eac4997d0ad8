package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// excerptBytes is how much of a response body is recorded with an attempt.
const excerptBytes = 1 << 10

// target is where and how a subscription's requests go: its URL, its
// signing secrets (the previous one only during a rotation's overlap) and
// its custom headers.
type target struct {
	url            string
	secret         string
	previousSecret string
	headers        map[string]string
}

// message is the body of one request and the id it is signed under: one
// event's envelope, or, for a subscription with max_batch, a JSON array of
// consecutive events' envelopes.
type message struct {
	id   string
	body []byte
	// traceParent is the first event's trace context (sync.Event.TraceParent).
	traceParent string
}

// singleMessage is the request of one event: its envelope, signed under
// the event's id, which receivers deduplicate by.
func singleMessage(ev *sync.Event) (message, error) {
	body, err := json.Marshal(ev.Envelope())
	if err != nil {
		return message{}, fmt.Errorf("envelope %d: %w", ev.Seq, err)
	}
	return message{id: ev.ID.String(), body: body, traceParent: ev.TraceParent}, nil
}

// batchMessage is the request of consecutive events of one subscription
// as one JSON array of envelopes, each with its own id and seq. Its id is
// derived from the subscription and the seqs it covers, so the same batch
// sent again carries the same webhook-id.
func batchMessage(subID uuid.UUID, evs []*sync.Event) (message, error) {
	envs := make([]sync.Envelope, len(evs))
	for i, ev := range evs {
		envs[i] = ev.Envelope()
	}
	body, err := json.Marshal(envs)
	if err != nil {
		return message{}, fmt.Errorf("batch envelope %d-%d: %w", evs[0].Seq, evs[len(evs)-1].Seq, err)
	}
	id := uuid.NewSHA1(subID, fmt.Appendf(nil, "batch:%d-%d:%d", evs[0].Seq, evs[len(evs)-1].Seq, len(evs)))
	return message{id: "batch_" + id.String(), body: body, traceParent: evs[0].TraceParent}, nil
}

// newRequest builds the request of one attempt, signed at ts with the
// target's secrets (both during a rotation's overlap): first the custom
// headers, then Content-Type and the signature scheme's headers, which no
// custom header can replace. User-Agent is ours unless the subscription
// sets one. A stored header that the store would refuse (a row written by
// hand) is left out. Errors name no key, no URL and no header value.
func newRequest(ctx context.Context, t *target, m *message, ts time.Time) (*http.Request, error) {
	sig, err := signature(t.secret, m.id, ts, m.body)
	if err == nil && t.previousSecret != "" {
		var old string
		if old, err = signature(t.previousSecret, m.id, ts, m.body); err == nil {
			sig += " " + old
		}
	}
	if err != nil {
		return nil, errors.New("signing: " + err.Error()) // the error of a bad key names no key
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(m.body))
	if err != nil {
		return nil, errors.New("request: " + scrubURL(err))
	}
	for name, v := range t.headers {
		if canonical, err := headerName(name); err == nil && len(v) <= MaxHeaderValueBytes && validHeaderValue(v) {
			req.Header.Set(canonical, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "bothy-webhooks/1")
	}
	req.Header.Set(standardwebhooks.HeaderWebhookID, m.id)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return req, nil
}

// signature returns the v1 signature of the Standard Webhooks scheme.
func signature(secret, msgID string, ts time.Time, body []byte) (string, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return "", errors.New("invalid signing secret")
	}
	return wh.Sign(msgID, ts, body)
}

// answer is what one request came back with.
type answer struct {
	kind       resultKind
	statusCode int
	duration   time.Duration
	err        string
	excerpt    string
	retryAfter time.Duration
}

// result kinds of one request.
type resultKind int

const (
	resultDelivered resultKind = iota
	resultRetry
	resultGone
)

func resultName(k resultKind) string {
	switch k {
	case resultDelivered:
		return "delivered"
	case resultGone:
		return "gone"
	}
	return "retry"
}

// post makes one attempt with client and reads at most maxBody bytes of
// the answer. It holds no transaction and no connection of the pool.
func post(client *http.Client, req *http.Request, maxBody int) answer {
	var a answer
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		a.duration = time.Since(start)
		a.kind, a.err = resultRetry, scrubURL(err)
		return a
	}
	buf := bytes.NewBuffer(make([]byte, 0, 64))
	_, rerr := io.Copy(buf, io.LimitReader(resp.Body, int64(min(excerptBytes, maxBody))))
	if rerr == nil && maxBody > excerptBytes {
		_, rerr = io.Copy(io.Discard, io.LimitReader(resp.Body, int64(maxBody-excerptBytes)))
	}
	_ = resp.Body.Close()
	a.duration = time.Since(start)
	a.statusCode = resp.StatusCode
	a.excerpt = validExcerpt(buf.String())
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		a.kind = resultDelivered // a body cut off by the cap does not undo a 2xx
	case resp.StatusCode == http.StatusGone:
		a.kind = resultGone
	default:
		a.kind = resultRetry
		a.err = fmt.Sprintf("receiver answered %s", resp.Status)
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			a.err += " (redirects are not followed)"
		}
		a.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		if rerr != nil {
			a.err += "; reading body: " + scrubURL(rerr)
		}
	}
	return a
}

// validExcerpt returns s as valid UTF-8, a rune cut at the cap dropped.
func validExcerpt(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// scrubURL returns err's text without the target URL: URLs often carry
// credentials (tokens in paths or queries), which must not reach the
// attempt record, logs or metrics.
func scrubURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout") {
		return "timeout: " + err.Error()
	}
	return err.Error()
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 if absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(30*24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
