package console

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// The API's JSON answers, as far as the console shows them.

type subscriptionView struct {
	ID               string     `json:"id"`
	Owner            string     `json:"owner"`
	Space            string     `json:"space"`
	URL              string     `json:"url"`
	EventTypes       []string   `json:"event_types"`
	Status           string     `json:"status"`
	DisabledCause    string     `json:"disabled_cause"`
	DisabledDetail   string     `json:"disabled_detail"`
	DisabledAt       *time.Time `json:"disabled_at"`
	LastDeliveredSeq int64      `json:"last_delivered_seq"`
	// LastSuccessSeq and LastSuccessAt are the newest delivery the
	// receiver answered 2xx; nil before the first.
	LastSuccessSeq *int64            `json:"last_success_seq"`
	LastSuccessAt  *time.Time        `json:"last_success_at"`
	Pending        int64             `json:"pending"`
	CreatedAt      time.Time         `json:"created_at"`
	Headers        map[string]string `json:"headers"`
	Policy         string            `json:"policy"`
	MaxInFlight    int               `json:"max_in_flight"`
	AutoRecover    bool              `json:"auto_recover"`
	Probing        bool              `json:"probing"`
	// The throttle, schedule and batch fields are absent while they are
	// the server's.
	MaxRequestsPerSecond *float64 `json:"max_requests_per_second"`
	RetryBaseSeconds     *float64 `json:"retry_base_seconds"`
	RetryMaxSeconds      *float64 `json:"retry_max_seconds"`
	RetryBudgetSeconds   *float64 `json:"retry_budget_seconds"`
	MaxBatch             int      `json:"max_batch"`
	// Destination is {"kind": ...} and a broker's fields, credentials
	// masked by the API.
	Destination map[string]any `json:"destination"`
	// Filter and Transform are the CEL expressions; "" for none.
	Filter    string `json:"filter"`
	Transform string `json:"transform"`
}

// previewView is the API's answer to a preview: per event, whether the
// subscription would be sent it and the body.
type previewView struct {
	Results []struct {
		Seq     int64           `json:"seq"`
		Type    string          `json:"type"`
		Matched bool            `json:"matched"`
		Body    json.RawMessage `json:"body"`
		Error   string          `json:"error"`
	} `json:"results"`
}

// Target is where the subscription's messages go, as the console names
// it: an http destination's URL, or a broker's kind and URL.
func (v subscriptionView) Target() string {
	if v.URL != "" {
		return v.URL
	}
	u, _ := v.Destination["url"].(string)
	return v.DestinationKind() + " " + u
}

// DestinationKind is the destination's kind; http when the API names none.
func (v subscriptionView) DestinationKind() string {
	if k, ok := v.Destination["kind"].(string); ok && k != "" {
		return k
	}
	return "http"
}

// destinationField is one field of a broker destination.
type destinationField struct{ Name, Value string }

// DestinationFields are a broker destination's fields but its kind, by
// name.
func (v subscriptionView) DestinationFields() []destinationField {
	var out []destinationField
	for _, k := range slices.Sorted(maps.Keys(v.Destination)) {
		if k != "kind" {
			out = append(out, destinationField{Name: k, Value: fmt.Sprint(v.Destination[k])})
		}
	}
	return out
}

type subscriptionsPage struct {
	Subscriptions []subscriptionView `json:"subscriptions"`
	NextCursor    string             `json:"next_cursor"`
}

type attemptView struct {
	At              time.Time `json:"at"`
	StatusCode      *int      `json:"status_code"`
	DurationSeconds float64   `json:"duration_seconds"`
	Error           string    `json:"error"`
	ResponseExcerpt string    `json:"response_excerpt"`
	// WebhookID is the webhook-id the request was signed under; "" when
	// no request was sent.
	WebhookID string `json:"webhook_id"`
}

type deliveryView struct {
	Seq           int64         `json:"seq"`
	EventID       string        `json:"event_id"`
	Status        string        `json:"status"`
	Attempts      int           `json:"attempts"`
	CreatedAt     time.Time     `json:"created_at"`
	FinishedAt    *time.Time    `json:"finished_at"`
	NextAttemptAt *time.Time    `json:"next_attempt_at"`
	LastError     string        `json:"last_error"`
	ResentAt      *time.Time    `json:"resent_at"`
	AttemptList   []attemptView `json:"attempt_list"`
}

// deliveryDetail is GET /v1/webhooks/{id}/deliveries/{seq}: the delivery
// with its event (null when retention removed it or the subject may not
// read the space's events) and its request's headers, their secrets masked
// by the API.
type deliveryDetail struct {
	deliveryView
	Event   *sync.Envelope `json:"event"`
	Request struct {
		Method  string            `json:"method"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
	} `json:"request"`
}

type deliveriesPage struct {
	Deliveries []deliveryView `json:"deliveries"`
	NextCursor string         `json:"next_cursor"`
}

type testSendView struct {
	StatusCode      *int    `json:"status_code"`
	LatencySeconds  float64 `json:"latency_seconds"`
	OK              bool    `json:"ok"`
	Error           string  `json:"error"`
	ResponseExcerpt string  `json:"response_excerpt"`
}

type registrationView struct {
	ID        string    `json:"id"`
	Endpoint  string    `json:"endpoint"`
	UserAgent string    `json:"user_agent"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

type registrationsPage struct {
	Registrations []registrationView `json:"registrations"`
	NextCursor    string             `json:"next_cursor"`
}

type preferenceView struct {
	Space  string `json:"space"`
	Notify bool   `json:"notify"`
}
