package webhooks

import (
	"encoding/json"
	"math"
	"time"
)

// The request bodies of the HTTP API's webhook routes: the API decodes
// them and the CLI sends them with --server, and builds its database calls
// from them without, so both ways read a command the same.

// CreateRequest is the body of POST /v1/webhooks. The owner is the
// caller.
type CreateRequest struct {
	Space string `json:"space"`
	// URL is an HTTP receiver's; a broker's destination is Destination.
	URL string `json:"url,omitempty"`
	// Destination is {"kind": "http", "url": ...} or a broker kind with
	// its fields; absent: URL.
	Destination json.RawMessage `json:"destination,omitempty"`
	EventTypes  []string        `json:"event_types,omitempty"`
	// Secret, if set, is used instead of a generated one (whsec_ form).
	Secret string `json:"secret,omitempty"`
	// Headers are sent with every request.
	Headers map[string]string `json:"headers,omitempty"`
	// Filter and Transform are CEL expressions over the event (see
	// CreateParams).
	Filter    string `json:"filter,omitempty"`
	Transform string `json:"transform,omitempty"`
	PolicyRequest
}

// UpdateRequest is the body of PATCH /v1/webhooks/{id}: absent fields keep
// their value.
type UpdateRequest struct {
	URL *string `json:"url,omitempty"`
	// Destination replaces the destination whole (how a broker's
	// credentials are rotated).
	Destination json.RawMessage `json:"destination,omitempty"`
	EventTypes  *[]string       `json:"event_types,omitempty"`
	// Headers is a merge patch: a value sets the header, null removes it.
	Headers map[string]*string `json:"headers,omitempty"`
	// Filter and Transform replace the expressions; "" removes one.
	Filter    *string `json:"filter,omitempty"`
	Transform *string `json:"transform,omitempty"`
	PolicyRequest
}

// Empty reports whether r changes nothing.
func (r *UpdateRequest) Empty() bool {
	return r.URL == nil && r.Destination == nil && r.EventTypes == nil && r.Headers == nil && r.Filter == nil && r.Transform == nil &&
		r.PolicyRequest.Params() == nil
}

// DisableRequest is the body of POST /v1/webhooks/{id}/disable.
type DisableRequest struct {
	Reason string `json:"reason,omitempty"`
}

// EnableRequest is the body of POST /v1/webhooks/{id}/enable.
type EnableRequest struct {
	// From is "head" (the default) or "backlog".
	From string `json:"from,omitempty"`
}

// RotateRequest is the body of POST /v1/webhooks/{id}/rotate-secret.
type RotateRequest struct {
	// OverlapSeconds is how long the old secret still signs as well.
	// Default 86400; 0 stops it at once.
	OverlapSeconds *int64 `json:"overlap_seconds,omitempty"`
}

// RecoverRequest is the body of POST /v1/webhooks/{id}/recover: a seq
// range or a time range, from the subscription's creation when neither
// from_seq nor since is given.
type RecoverRequest struct {
	FromSeq *int64     `json:"from_seq,omitempty"`
	ToSeq   *int64     `json:"to_seq,omitempty"`
	Since   *time.Time `json:"since,omitempty"`
	Until   *time.Time `json:"until,omitempty"`
	// BeforeCreation allows a range that starts before the subscription
	// was created (RecoverParams.BeforeCreation).
	BeforeCreation *bool `json:"before_creation,omitempty"`
}

// PolicyRequest is the delivery policy part of a create or update
// (PolicyParams): absent fields keep their value (at create, their
// default), 0 returns one to its default.
type PolicyRequest struct {
	Policy               *string  `json:"policy,omitempty"`
	MaxInFlight          *int     `json:"max_in_flight,omitempty"`
	AutoRecover          *bool    `json:"auto_recover,omitempty"`
	MaxRequestsPerSecond *float64 `json:"max_requests_per_second,omitempty"`
	RetryBaseSeconds     *float64 `json:"retry_base_seconds,omitempty"`
	RetryMaxSeconds      *float64 `json:"retry_max_seconds,omitempty"`
	RetryBudgetSeconds   *float64 `json:"retry_budget_seconds,omitempty"`
	MaxBatch             *int     `json:"max_batch,omitempty"`
}

// Params converts the request, nil if it sets nothing; the store
// validates the values and names the field of a bad one.
func (p *PolicyRequest) Params() *PolicyParams {
	out := &PolicyParams{Name: p.Policy, MaxInFlight: p.MaxInFlight, AutoRecover: p.AutoRecover,
		MaxRequestsPerSecond: p.MaxRequestsPerSecond, RetryBase: duration(p.RetryBaseSeconds),
		RetryMax: duration(p.RetryMaxSeconds), RetryBudget: duration(p.RetryBudgetSeconds), MaxBatch: p.MaxBatch}
	if out.empty() {
		return nil
	}
	return out
}

// duration converts seconds, keeping values far out of any range out of
// range instead of overflowing.
func duration(secs *float64) *time.Duration {
	if secs == nil {
		return nil
	}
	s := *secs
	if math.IsNaN(s) {
		s = -1
	}
	d := time.Duration(math.Max(math.Min(s, 1e9), -1e9) * float64(time.Second))
	return &d
}
