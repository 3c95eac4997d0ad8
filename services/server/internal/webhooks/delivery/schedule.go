package delivery

import (
	"math/rand/v2"
	"time"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// maxProbeWait is the longest wait between two probes of a recovering
// subscription unless its RetryMax is longer.
const maxProbeWait = time.Hour

// schedule is a subscription's effective retry schedule.
type schedule struct {
	base, max, budget time.Duration
}

// schedule resolves p's retry schedule against the configuration. A base
// above the cap waits the cap.
func (d *Deliverer) schedule(p *webhooks.Policy) schedule {
	s := schedule{base: d.cfg.RetryBase, max: d.cfg.RetryMax, budget: d.cfg.RetryBudget}
	if p.RetryBase > 0 {
		s.base = p.RetryBase
	}
	if p.RetryMax > 0 {
		s.max = p.RetryMax
	}
	if p.RetryBudget > 0 {
		s.budget = p.RetryBudget
	}
	s.base = min(s.base, s.max)
	return s
}

// backoff is the wait before retry number attempts: the base doubled per
// attempt, capped at the schedule's max, with jitter over its upper half,
// and at least what the receiver asked for with Retry-After (capped
// likewise).
func backoff(s schedule, attempts int, retryAfter time.Duration) time.Duration {
	w := s.base
	for i := 1; i < attempts && w < s.max; i++ {
		w *= 2
	}
	return jitter(min(w, s.max), retryAfter, s.max)
}

// probeWait is the wait before the next probe after probes failed ones:
// the schedule's max doubled per probe up to an hour (or the max, if that
// is longer), with jitter, and at least Retry-After (capped by the max).
func probeWait(s schedule, probes int, retryAfter time.Duration) time.Duration {
	ceiling := max(s.max, maxProbeWait)
	w := s.max
	for range probes {
		if w >= ceiling {
			break
		}
		w *= 2
	}
	return jitter(min(w, ceiling), retryAfter, s.max)
}

// jitter spreads w over its upper half and raises it to retryAfter capped
// at limit.
func jitter(w, retryAfter, limit time.Duration) time.Duration {
	if w > 1 {
		w = w/2 + rand.N(w/2+1)
	}
	return max(w, min(retryAfter, limit))
}
