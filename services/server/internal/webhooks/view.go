package webhooks

import (
	"cmp"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// DeliveryView is a delivery as the HTTP API and the CLI's --json show it.
type DeliveryView struct {
	Seq           int64      `json:"seq"`
	EventID       uuid.UUID  `json:"event_id"`
	Status        string     `json:"status"`
	Attempts      int        `json:"attempts"`
	CreatedAt     time.Time  `json:"created_at"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	// ResentAt is when a resend last made it pending again.
	ResentAt *time.Time `json:"resent_at,omitempty"`
	// AttemptList is nil when attempts were not asked for (omitted), else
	// the list, possibly empty.
	AttemptList *[]AttemptView `json:"attempt_list,omitempty"`
}

// AttemptView is one attempt of a DeliveryView.
type AttemptView struct {
	At              time.Time `json:"at"`
	StatusCode      *int      `json:"status_code"`
	DurationSeconds float64   `json:"duration_seconds"`
	Error           string    `json:"error,omitempty"`
	ResponseExcerpt string    `json:"response_excerpt,omitempty"`
	// WebhookID is the webhook-id the request was signed under: the
	// event's id, or a batch's; absent when no request was sent.
	WebhookID string `json:"webhook_id,omitempty"`
}

// SentWebhookID is the webhook-id of the newest attempt that sent a
// request, "" if none did (or attempts were left out).
func (v *DeliveryView) SentWebhookID() string {
	if v.AttemptList == nil {
		return ""
	}
	list := *v.AttemptList
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].WebhookID != "" {
			return list[i].WebhookID
		}
	}
	return ""
}

// NewDeliveryView returns d with its attempts. With withAttempts false the
// attempt list is left out; with it true the list is present even if empty.
func NewDeliveryView(d *Delivery, attempts []Attempt, withAttempts bool) DeliveryView {
	v := DeliveryView{Seq: d.Seq, EventID: d.EventID, Status: d.Status, Attempts: d.Attempts, CreatedAt: d.CreatedAt,
		FinishedAt: d.FinishedAt, NextAttemptAt: d.NextAttemptAt, LastError: d.LastError, ResentAt: d.ResentAt}
	if !withAttempts {
		return v
	}
	list := make([]AttemptView, 0, len(attempts))
	for _, a := range attempts {
		id := d.EventID.String()
		if a.MessageID != nil {
			id = *a.MessageID
		}
		list = append(list, AttemptView{At: a.At, StatusCode: a.StatusCode,
			DurationSeconds: a.Duration.Seconds(), Error: a.Error, ResponseExcerpt: a.ResponseHead, WebhookID: id})
	}
	v.AttemptList = &list
	return v
}

// RecoverView is a RecoverResult as the HTTP API and the CLI's --json show
// it: null for an empty range, and the lost part as seqs or, for a time
// range, as times.
type RecoverView struct {
	Range   *SeqRangeView `json:"range"`
	Reset   int64         `json:"reset"`
	Created int64         `json:"created"`
	Lost    *LostView     `json:"lost"`
}

// SeqRangeView is a range of seqs, both ends included.
type SeqRangeView struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// LostView is what retention removed of a recovered range: seqs for a seq
// range, times for a time range.
type LostView struct {
	From  int64      `json:"from,omitempty"`
	To    int64      `json:"to,omitempty"`
	Since *time.Time `json:"since,omitempty"`
	Until *time.Time `json:"until,omitempty"`
}

// View returns r as the API and the CLI show it.
func (r *RecoverResult) View() RecoverView {
	v := RecoverView{Reset: r.Reset, Created: r.Created}
	if r.Range.Len() > 0 {
		v.Range = &SeqRangeView{From: r.Range.From, To: r.Range.To}
	}
	switch {
	case r.Lost.Len() > 0:
		v.Lost = &LostView{From: r.Lost.From, To: r.Lost.To}
	case !r.LostSince.IsZero():
		since, until := r.LostSince.UTC(), r.LostUntil.UTC()
		v.Lost = &LostView{Since: &since, Until: &until}
	}
	return v
}

// SubscriptionView is a subscription as the HTTP API answers it and the
// CLI prints it with --json (which hides the URL's query, as its tables
// do).
type SubscriptionView struct {
	ID    uuid.UUID `json:"id"`
	Owner string    `json:"owner"`
	Space string    `json:"space"`
	// URL is an http destination's, "" for a broker's.
	URL string `json:"url"`
	// Destination is {"kind": ...} and, for a broker kind, its fields
	// with credentials masked (outbound.Masked).
	Destination json.RawMessage `json:"destination"`
	EventTypes  []string        `json:"event_types"`
	// TokenID is the token whose current scopes bound every delivery;
	// absent: the owner's full rights.
	TokenID        *uuid.UUID `json:"token_id,omitempty"`
	Status         string     `json:"status"`
	DisabledCause  string     `json:"disabled_cause,omitempty"`
	DisabledDetail string     `json:"disabled_detail,omitempty"`
	DisabledAt     *time.Time `json:"disabled_at,omitempty"`
	ResumeAfterSeq int64      `json:"resume_after_seq"`
	// LastDeliveredSeq is the sender's resume point, not a delivery: the
	// highest seq delivered, or the head at creation (or at an enable from
	// the head) while nothing was delivered since. Kept under its old name
	// for compatibility; LastSuccessSeq says what was delivered.
	LastDeliveredSeq int64 `json:"last_delivered_seq"`
	// LastSuccessSeq is the seq of the newest delivery actually delivered
	// (answered 2xx) among those kept, and LastSuccessAt when; both null
	// when there is none.
	LastSuccessSeq *int64     `json:"last_success_seq"`
	LastSuccessAt  *time.Time `json:"last_success_at"`
	Pending        int64      `json:"pending"`
	CreatedAt      time.Time  `json:"created_at"`
	// Headers are the custom headers with masked values (MaskHeaders):
	// the whole values are never shown again.
	Headers map[string]string `json:"headers"`
	// Filter and Transform are the CEL expressions; absent: none.
	Filter    string `json:"filter,omitempty"`
	Transform string `json:"transform,omitempty"`
	// Secret is only set in the answers that create it.
	Secret string `json:"secret,omitempty"`
	PolicyView
}

// NewSubscriptionView returns s as the API shows it, without its secret.
func NewSubscriptionView(s *Subscription) SubscriptionView {
	types := s.EventTypes
	if types == nil {
		types = []string{}
	}
	return SubscriptionView{ID: s.ID, Owner: s.Owner, Space: s.Space, URL: s.URL, EventTypes: types, TokenID: s.TokenID,
		Status: s.Status, DisabledCause: s.DisabledCause, DisabledDetail: s.DisabledDetail, DisabledAt: s.DisabledAt,
		ResumeAfterSeq: s.ResumeAfterSeq, LastDeliveredSeq: s.LastDeliveredSeq, LastSuccessSeq: s.LastSuccessSeq,
		LastSuccessAt: utcPtr(s.LastSuccessAt), Pending: s.Pending, CreatedAt: s.CreatedAt,
		Headers: MaskHeaders(s.Headers), Destination: s.Destination.View(), Filter: s.Filter, Transform: s.Transform, PolicyView: NewPolicyView(s)}
}

// View is d as the API shows it: its kind beside its redacted fields.
func (d *Destination) View() json.RawMessage {
	fields := map[string]any{}
	_ = json.Unmarshal(d.Redacted(), &fields) // {} when unreadable
	fields["kind"] = cmp.Or(d.Kind, outbound.KindHTTP)
	out, err := json.Marshal(fields)
	if err != nil {
		return json.RawMessage(`{"kind":"` + outbound.KindHTTP + `"}`)
	}
	return out
}

// utcPtr returns *t in UTC, nil for nil.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// PolicyView is a subscription's delivery policy as the API shows it. The
// throttle, schedule and batch fields are absent while they are the
// server's.
type PolicyView struct {
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

// NewPolicyView returns s's policy as the API shows it.
func NewPolicyView(s *Subscription) PolicyView {
	p := &s.Policy
	out := PolicyView{Policy: p.Name, MaxInFlight: p.MaxInFlight, AutoRecover: p.AutoRecover, Probing: s.Probing,
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

// EnableView is the answer to enabling a subscription.
type EnableView struct {
	Subscription SubscriptionView `json:"subscription"`
	// WasCause is why it had been disabled ("" if it was active).
	WasCause       string `json:"was_cause"`
	ResumeAfterSeq int64  `json:"resume_after_seq"`
	Skipped        int64  `json:"skipped"`
	// From is where it resumed: head or backlog.
	From string `json:"from"`
	// Created is how many deliveries the backlog made for events
	// committed while it was disabled.
	Created int64 `json:"created"`
	// Reset is how many dead deliveries the backlog made pending again:
	// those that disabled the subscription.
	Reset int64 `json:"reset"`
	// NotDelivered is the range of seqs that will never be delivered, or
	// null.
	NotDelivered *SeqRangeView `json:"not_delivered"`
}

// NewEnableView returns the answer to enabling s from (head or backlog)
// with result r; s is the subscription as it is afterwards.
func NewEnableView(s *Subscription, from string, r *EnableResult) EnableView {
	v := EnableView{Subscription: NewSubscriptionView(s), WasCause: r.WasCause, ResumeAfterSeq: r.ResumeAfterSeq,
		Skipped: r.Skipped, From: from, Created: r.Created, Reset: r.Reset}
	if r.NotDeliveredTo > 0 {
		v.NotDelivered = &SeqRangeView{From: r.NotDeliveredFrom, To: r.NotDeliveredTo}
	}
	return v
}

// RotateView is the answer to rotating a subscription's secret.
type RotateView struct {
	// Secret is the new signing secret, shown this once.
	Secret string `json:"secret"`
	// OverlapSeconds is how long the previous secret still signs as well.
	OverlapSeconds int64 `json:"overlap_seconds"`
	// PreviousSecretUntil is when the previous secret stops signing;
	// absent for no overlap.
	PreviousSecretUntil *time.Time `json:"previous_secret_until,omitempty"`
}

// NewRotateView returns the answer to a rotation to secret at now whose
// previous secret signs for overlap.
func NewRotateView(secret string, overlap time.Duration, now time.Time) RotateView {
	v := RotateView{Secret: secret, OverlapSeconds: int64(overlap / time.Second)}
	if overlap > 0 {
		until := now.Add(overlap).UTC().Truncate(time.Second)
		v.PreviousSecretUntil = &until
	}
	return v
}

// TestView is the answer to sending a test message.
type TestView struct {
	MessageID uuid.UUID `json:"message_id"`
	// StatusCode is null when no answer came.
	StatusCode      *int    `json:"status_code"`
	LatencySeconds  float64 `json:"latency_seconds"`
	OK              bool    `json:"ok"`
	Error           string  `json:"error,omitempty"`
	ResponseExcerpt string  `json:"response_excerpt,omitempty"`
}

// View returns r as the API shows it.
func (r *TestResult) View() TestView {
	v := TestView{MessageID: r.MessageID, LatencySeconds: r.Latency.Seconds(), OK: r.Error == "", Error: r.Error,
		ResponseExcerpt: r.ResponseExcerpt}
	if r.StatusCode != 0 {
		v.StatusCode = &r.StatusCode
	}
	return v
}

// SubscriptionsPage is a page of GET /v1/webhooks.
type SubscriptionsPage struct {
	Subscriptions []SubscriptionView `json:"subscriptions"`
	// NextCursor is set when more may follow.
	NextCursor string `json:"next_cursor,omitempty"`
}

// DeliveriesPage is a page of GET /v1/webhooks/{id}/deliveries.
type DeliveriesPage struct {
	Deliveries []DeliveryView `json:"deliveries"`
	// NextCursor is set when more may follow.
	NextCursor string `json:"next_cursor,omitempty"`
}

// StatsView is the answer of GET /v1/webhooks/{id}/stats and what the CLI
// prints with --json: a subscription's attempts over a window, by
// interval, as the console charts them.
type StatsView struct {
	SubscriptionID uuid.UUID `json:"subscription_id"`
	// Since is the start of the first interval, Until the end of the
	// last (excluded).
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// StepSeconds is each interval's length; the last one ends at Until
	// and may be shorter.
	StepSeconds int64 `json:"step_seconds"`
	// OK and Failed total the intervals.
	OK     int64 `json:"ok"`
	Failed int64 `json:"failed"`
	// SuccessRate is OK/(OK+Failed), null without attempts.
	SuccessRate *float64 `json:"success_rate"`
	// Intervals are in time order, one per step, also those without
	// attempts.
	Intervals []StatsInterval `json:"intervals"`
}

// StatsInterval is one interval of a StatsView.
type StatsInterval struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// OK counts attempts answered 2xx or confirmed by a broker; Failed every other attempt: another
	// status, no answer, or a refusal before any request.
	OK     int64 `json:"ok"`
	Failed int64 `json:"failed"`
	// LatencyP50Seconds and LatencyP95Seconds are the median and the 95th
	// percentile of the requests' durations (a refusal sent none), to the
	// millisecond; null without requests.
	LatencyP50Seconds *float64 `json:"latency_p50_seconds"`
	LatencyP95Seconds *float64 `json:"latency_p95_seconds"`
	// SuccessRate is OK/(OK+Failed), null without attempts.
	SuccessRate *float64 `json:"success_rate"`
}
