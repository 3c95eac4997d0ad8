package outbound

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

	"github.com/bothy/bothy/services/server/internal/retryafter"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// ExcerptBytes is how much of a response body is kept with an answer.
const ExcerptBytes = 1 << 10

// Target is where and how a subscription's messages go: its destination
// (an HTTP URL, or a broker kind's fields), its signing secrets (the
// previous one only during a rotation's overlap) and its custom headers.
type Target struct {
	URL            string
	Secret         string
	PreviousSecret string
	Headers        map[string]string
	// Kind is the destination's kind ("" or KindHTTP: URL); Config is a
	// broker kind's fields as stored, credentials whole: never shown but
	// through Kinds.Redacted.
	Kind   string
	Config json.RawMessage
}

// Message is the body of one request and the id it is signed under
// (webhook-id): one event's envelope, or, for a subscription with
// max_batch, a JSON array of consecutive events' envelopes.
type Message struct {
	ID   string
	Body []byte
	// TraceParent is the first event's trace context (sync.Event.TraceParent).
	TraceParent string
	// Space, Type and Seq are the first event's, LastSeq the last's: what
	// a broker destination's subject, key and entry id are made of.
	Space   string
	Type    string
	Seq     int64
	LastSeq int64
	// Resent is when the owner asked for the message to be sent again
	// (its delivery's resent_at, the latest of a batch's); zero for a
	// first sending. The webhook-id stays ID: a receiver that deduplicates
	// by it takes a resend for the message it has, as over HTTP.
	Resent time.Time
}

// RepeatKey is what a destination that drops repeats by a key of its own
// knows m by: its id for a first sending; for a resend, its id and the
// resend's time, so that a resend is a new message there while its own
// repeats (an attempt again after a lost answer or a crash) are still
// dropped.
func (m *Message) RepeatKey() string {
	if m.Resent.IsZero() {
		return m.ID
	}
	return m.ID + ".r" + strconv.FormatInt(m.Resent.UnixNano(), 10)
}

// SingleMessage is the request of one event: its envelope, signed under
// the event's id, which receivers deduplicate by.
func SingleMessage(ev *sync.Event) (Message, error) {
	body, err := json.Marshal(ev.Envelope())
	if err != nil {
		return Message{}, fmt.Errorf("envelope %d: %w", ev.Seq, err)
	}
	return Message{ID: ev.ID.String(), Body: body, TraceParent: ev.TraceParent,
		Space: ev.Space, Type: ev.Type, Seq: ev.Seq, LastSeq: ev.Seq}, nil
}

// BatchMessage is the request of consecutive events of one subscription
// as one JSON array of envelopes, each with its own id and seq. Its id is
// derived from the subscription and the seqs it covers, so the same batch
// sent again carries the same webhook-id.
func BatchMessage(subID uuid.UUID, evs []*sync.Event) (Message, error) {
	envs := make([]sync.Envelope, len(evs))
	for i, ev := range evs {
		envs[i] = ev.Envelope()
	}
	body, err := json.Marshal(envs)
	if err != nil {
		return Message{}, fmt.Errorf("batch envelope %d-%d: %w", evs[0].Seq, evs[len(evs)-1].Seq, err)
	}
	return batchMessage(subID, evs, body), nil
}

// ShapedMessage is SingleMessage with body, the event's transformed form,
// sent instead of its envelope; it is signed under the event's id like the
// envelope would be.
func ShapedMessage(ev *sync.Event, body json.RawMessage) Message {
	return Message{ID: ev.ID.String(), Body: body, TraceParent: ev.TraceParent,
		Space: ev.Space, Type: ev.Type, Seq: ev.Seq, LastSeq: ev.Seq}
}

// ShapedBatchMessage is BatchMessage with bodies, the events' transformed
// forms in their order, sent as one JSON array instead of their envelopes,
// under the id BatchMessage gives the same events.
func ShapedBatchMessage(subID uuid.UUID, evs []*sync.Event, bodies []json.RawMessage) (Message, error) {
	body, err := json.Marshal(bodies)
	if err != nil {
		return Message{}, fmt.Errorf("batch body %d-%d: %w", evs[0].Seq, evs[len(evs)-1].Seq, err)
	}
	return batchMessage(subID, evs, body), nil
}

// batchMessage is the message of evs with body, under an id derived from
// the subscription and the seqs it covers.
func batchMessage(subID uuid.UUID, evs []*sync.Event, body []byte) Message {
	id := uuid.NewSHA1(subID, fmt.Appendf(nil, "batch:%d-%d:%d", evs[0].Seq, evs[len(evs)-1].Seq, len(evs)))
	last := evs[len(evs)-1]
	return Message{ID: "batch_" + id.String(), Body: body, TraceParent: evs[0].TraceParent,
		Space: evs[0].Space, Type: evs[0].Type, Seq: evs[0].Seq, LastSeq: last.Seq}
}

// NewRequest builds the request of one attempt, signed at ts with the
// target's secrets (both during a rotation's overlap): first the custom
// headers, then Content-Type and the signature scheme's headers, which no
// custom header can replace. User-Agent is ours unless the subscription
// sets one. A stored header that the store would refuse (a row written by
// hand) is left out. Errors name no key, no URL and no header value.
func NewRequest(ctx context.Context, t *Target, m *Message, ts time.Time) (*http.Request, error) {
	sig, err := signature(t.Secret, m.ID, ts, m.Body)
	if err == nil && t.PreviousSecret != "" {
		var old string
		if old, err = signature(t.PreviousSecret, m.ID, ts, m.Body); err == nil {
			sig += " " + old
		}
	}
	if err != nil {
		return nil, errors.New("signing: " + err.Error()) // the error of a bad key names no key
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(m.Body))
	if err != nil {
		return nil, errors.New("request: " + ScrubURL(err))
	}
	SetHeaders(req.Header, t.Headers, m.ID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return req, nil
}

// SetHeaders sets the headers of a request but its timestamp and
// signature: the custom headers (those the store would refuse are left
// out), then Content-Type, User-Agent unless a custom header set it, and
// the message id unless it is "".
func SetHeaders(h http.Header, custom map[string]string, msgID string) {
	for name, v := range custom {
		if canonical, ok := usableHeader(name, v); ok {
			h.Set(canonical, v)
		}
	}
	h.Set("Content-Type", "application/json")
	if h.Get("User-Agent") == "" {
		h.Set("User-Agent", "bothy-webhooks/1")
	}
	if msgID != "" {
		h.Set(standardwebhooks.HeaderWebhookID, msgID)
	}
}

// signature returns the v1 signature of the Standard Webhooks scheme.
func signature(secret, msgID string, ts time.Time, body []byte) (string, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return "", errors.New("invalid signing secret")
	}
	return wh.Sign(msgID, ts, body)
}

// Answer is what one request came back with.
type Answer struct {
	Kind Kind
	// StatusCode is the receiver's; 0 when no answer came.
	StatusCode int
	Duration   time.Duration
	// Err says why the request failed, without the URL; "" for a 2xx.
	Err string
	// Excerpt is the start of the response body (ExcerptBytes at most).
	Excerpt string
	// RetryAfter is what the receiver asked for with Retry-After.
	RetryAfter time.Duration
}

// Kind is what an answer means for its delivery.
type Kind int

const (
	// Delivered: a 2xx.
	Delivered Kind = iota
	// Retry: no answer, or one that asks to try again later.
	Retry
	// Gone: 410, the receiver is gone for good.
	Gone
)

// String is the kind as the delivery metrics name it.
func (k Kind) String() string {
	switch k {
	case Delivered:
		return "delivered"
	case Gone:
		return "gone"
	}
	return "retry"
}

// Post makes one attempt with client and reads at most maxBody bytes of
// the answer.
func Post(client *http.Client, req *http.Request, maxBody int) Answer {
	var a Answer
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		a.Duration = time.Since(start)
		a.Kind, a.Err = Retry, ScrubURL(err)
		return a
	}
	buf := bytes.NewBuffer(make([]byte, 0, 64))
	_, rerr := io.Copy(buf, io.LimitReader(resp.Body, int64(min(ExcerptBytes, maxBody))))
	if rerr == nil && maxBody > ExcerptBytes {
		_, rerr = io.Copy(io.Discard, io.LimitReader(resp.Body, int64(maxBody-ExcerptBytes)))
	}
	_ = resp.Body.Close()
	a.Duration = time.Since(start)
	a.StatusCode = resp.StatusCode
	a.Excerpt = validExcerpt(buf.String())
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		a.Kind = Delivered // a body cut off by the cap does not undo a 2xx
	case resp.StatusCode == http.StatusGone:
		a.Kind = Gone
	default:
		a.Kind = Retry
		a.Err = fmt.Sprintf("receiver answered %s", resp.Status)
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			a.Err += " (redirects are not followed)"
		}
		a.RetryAfter = retryafter.Parse(resp.Header.Get("Retry-After"), time.Now())
		if rerr != nil {
			a.Err += "; reading body: " + ScrubURL(rerr)
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

// ScrubURL returns err's text without the target URL: URLs often carry
// credentials (tokens in paths or queries), which must not reach the
// attempt record, logs or metrics.
func ScrubURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout") {
		return "timeout: " + err.Error()
	}
	return err.Error()
}
