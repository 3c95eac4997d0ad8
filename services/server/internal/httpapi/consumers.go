package httpapi

import (
	"net/http"
	"slices"
	"time"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// consumerJSON is one consumer's status; the names are those of
// "bothy consumers status --json".
type consumerJSON struct {
	Name    string `json:"name"`
	LastSeq int64  `json:"last_seq"`
	Head    int64  `json:"head_seq"`
	Lag     int64  `json:"lag"`
	// PendingAgeSeconds is the age of the oldest unprocessed event; 0
	// when the consumer is caught up.
	PendingAgeSeconds float64    `json:"pending_age_seconds"`
	LastRoundAt       *time.Time `json:"last_round_at"`
	// Lost is the range retention removed before the consumer read it,
	// which its next round skips; null when none.
	Lost *seqRangeJSON `json:"lost"`
}

type seqRangeJSON struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

type consumersJSON struct {
	Consumers []consumerJSON `json:"consumers"`
}

// mayReadOps: consumer cursors span every space, so they need the global
// ops:read scope rather than a right on some space.
func mayReadOps(s *authz.Subject) error {
	if slices.Contains(s.Scopes, authz.ScopeOpsRead) {
		return nil
	}
	return errorf(http.StatusForbidden, kindForbidden, "consumer status needs a token with scope %s", authz.ScopeOpsRead)
}

// listConsumers answers every consumer's cursor, the log's head and the
// lag between them.
func (a *API) listConsumers(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	if err := mayReadOps(s); err != nil {
		return err
	}
	sts, err := a.status.ConsumerStatuses(r.Context())
	if err != nil {
		return err
	}
	out := consumersJSON{Consumers: make([]consumerJSON, 0, len(sts))}
	for _, st := range sts {
		c := consumerJSON{Name: st.Name, LastSeq: st.LastSeq, Head: st.Head, Lag: st.Lag,
			PendingAgeSeconds: st.PendingAge.Seconds(), LastRoundAt: st.LastRoundAt}
		if st.Lost.Len() > 0 {
			c.Lost = &seqRangeJSON{From: st.Lost.From, To: st.Lost.To}
		}
		out.Consumers = append(out.Consumers, c)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
