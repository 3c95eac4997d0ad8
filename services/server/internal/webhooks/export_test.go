package webhooks

import (
	"github.com/google/uuid"
	"github.com/riverqueue/river"
)

// SetNoticeAfterAppend makes w run f after each successful append, as if
// the job failed (or its process died) between the append and its
// completion.
func SetNoticeAfterAppend(w *NoticeWorker, f func(job *river.Job[NoticeArgs]) error) {
	w.afterAppend = f
}

// SetAfterRelease makes d run f in each transaction that gives up a
// sender's claim, after the release and before the commit.
func SetAfterRelease(d *Deliverer, f func(subID uuid.UUID)) {
	d.afterRelease = f
}
