package webhooks

import (
	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// Queue is the River queue of delivery jobs.
const Queue = "webhooks"

// KindDeliver is the job kind of deliveries.
const KindDeliver = "webhook_out.deliver"

// DeliverArgs is a delivery job: it asks for a sender of one subscription.
// A job is only inserted for a subscription that no live sender holds (see
// wakeOrStart); Seq is the lowest seq the round that created the job
// added, for logs and tracing only: a sender sends every pending delivery
// of its subscription, not just that seq.
type DeliverArgs struct {
	SubscriptionID uuid.UUID `json:"subscription_id"`
	Seq            int64     `json:"seq"`
}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return KindDeliver }

// InsertOpts puts delivery jobs on their own queue. Retries of a failing
// receiver are waits of the sender, not attempts of the job; MaxAttempts
// only bounds database trouble.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 25}
}

// EventSeq implements sync.EventArgs: a delivery job carries the trace
// context of the lowest event its round added, so its runs join that
// event's trace.
func (a DeliverArgs) EventSeq() int64 { return a.Seq }

var _ sync.EventArgs = DeliverArgs{}
