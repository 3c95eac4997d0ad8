package httpapi

import (
	"math"
	"time"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// policyRequest is the delivery policy part of a create or PATCH of a
// webhook subscription (webhooks.PolicyParams): absent fields keep their
// value (at create, their default), 0 returns one to its default.
type policyRequest struct {
	Policy               *string  `json:"policy"`
	MaxInFlight          *int     `json:"max_in_flight"`
	AutoRecover          *bool    `json:"auto_recover"`
	MaxRequestsPerSecond *float64 `json:"max_requests_per_second"`
	RetryBaseSeconds     *float64 `json:"retry_base_seconds"`
	RetryMaxSeconds      *float64 `json:"retry_max_seconds"`
	RetryBudgetSeconds   *float64 `json:"retry_budget_seconds"`
	MaxBatch             *int     `json:"max_batch"`
}

func (p *policyRequest) empty() bool {
	return p.Policy == nil && p.MaxInFlight == nil && p.AutoRecover == nil && p.MaxRequestsPerSecond == nil &&
		p.RetryBaseSeconds == nil && p.RetryMaxSeconds == nil && p.RetryBudgetSeconds == nil && p.MaxBatch == nil
}

// params converts the request; webhooks validates the values and names
// the field of a bad one.
func (p *policyRequest) params() *webhooks.PolicyParams {
	if p.empty() {
		return nil
	}
	return &webhooks.PolicyParams{Name: p.Policy, MaxInFlight: p.MaxInFlight, AutoRecover: p.AutoRecover,
		MaxRequestsPerSecond: p.MaxRequestsPerSecond, RetryBase: duration(p.RetryBaseSeconds),
		RetryMax: duration(p.RetryMaxSeconds), RetryBudget: duration(p.RetryBudgetSeconds), MaxBatch: p.MaxBatch}
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

// policyJSON is a subscription's delivery policy as the API shows it. The
// throttle and schedule fields are absent while they are the server's.
type policyJSON struct {
	Policy               string   `json:"policy"`
	MaxInFlight          int      `json:"max_in_flight,omitempty"`
	AutoRecover          bool     `json:"auto_recover"`
	Probing              bool     `json:"probing"`
	MaxRequestsPerSecond *float64 `json:"max_requests_per_second,omitempty"`
	RetryBaseSeconds     *float64 `json:"retry_base_seconds,omitempty"`
	RetryMaxSeconds      *float64 `json:"retry_max_seconds,omitempty"`
	RetryBudgetSeconds   *float64 `json:"retry_budget_seconds,omitempty"`
	MaxBatch             int      `json:"max_batch,omitempty"`
}

func policyOut(s *webhooks.Subscription) policyJSON {
	p := &s.Policy
	out := policyJSON{Policy: p.Name, MaxInFlight: p.MaxInFlight, AutoRecover: p.AutoRecover, Probing: s.Probing,
		RetryBaseSeconds: seconds(p.RetryBase), RetryMaxSeconds: seconds(p.RetryMax), RetryBudgetSeconds: seconds(p.RetryBudget),
		MaxBatch: p.MaxBatch}
	if p.MaxRequestsPerSecond > 0 {
		out.MaxRequestsPerSecond = &p.MaxRequestsPerSecond
	}
	return out
}

// seconds is d in seconds, nil for 0.
func seconds(d time.Duration) *float64 {
	if d == 0 {
		return nil
	}
	s := d.Seconds()
	return &s
}
