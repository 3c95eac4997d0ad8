package webhooks

import (
	"time"

	"github.com/google/uuid"
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
}

// NewDeliveryView returns d with its attempts. With withAttempts false the
// attempt list is left out; with it true the list is present even if empty.
func NewDeliveryView(d *Delivery, attempts []Attempt, withAttempts bool) DeliveryView {
	v := DeliveryView{Seq: d.Seq, EventID: d.EventID, Status: d.Status, Attempts: d.Attempts, CreatedAt: d.CreatedAt,
		FinishedAt: d.FinishedAt, NextAttemptAt: d.NextAttemptAt, LastError: d.LastError}
	if !withAttempts {
		return v
	}
	list := make([]AttemptView, 0, len(attempts))
	for _, a := range attempts {
		list = append(list, AttemptView{At: a.At, StatusCode: a.StatusCode,
			DurationSeconds: a.Duration.Seconds(), Error: a.Error, ResponseExcerpt: a.ResponseHead})
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
