package webhooks

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
)

// SetNoticeAfterAppend makes w run f after each successful append, as if
// the job failed (or its process died) between the append and its
// completion.
func SetNoticeAfterAppend(w *NoticeWorker, f func(job *river.Job[NoticeArgs]) error) {
	w.afterAppend = f
}

// StatsSQL is the statement of Stats, for its plan.
const StatsSQL = statsSQL

// Counter is the counter behind e.
func (e *ExpressionErrors) Counter() *prometheus.CounterVec { return e.c }
