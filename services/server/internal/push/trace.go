package push

import "github.com/bothy/bothy/services/server/internal/sync"

// EventSeq implements sync.EventArgs: a push job carries the trace context
// of its first event, so its runs join that event's trace.
func (a DeliverArgs) EventSeq() int64 {
	if len(a.Events) == 0 {
		return 0
	}
	return a.Events[0].Seq
}

var _ sync.EventArgs = DeliverArgs{}
