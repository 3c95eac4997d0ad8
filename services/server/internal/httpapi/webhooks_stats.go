package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// webhookStats answers a subscription's delivery statistics over the
// window the query gives (since, until, step), to whoever may read the
// subscription. A bad value or a window out of bounds is 400 naming the
// parameter, as every refused query parameter is.
func (a *API) webhookStats(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, err := a.subscription(r, s)
	if err != nil {
		return err
	}
	p, err := statsParams(r)
	if err != nil {
		return err
	}
	p.SubscriptionID = sub.ID
	v, err := webhooks.Stats(r.Context(), a.pool, p)
	if errors.Is(err, webhooks.ErrInvalid) {
		return errorf(http.StatusBadRequest, kindBadRequest, "%v", err)
	}
	if err != nil {
		return webhookError(err)
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// statsParams reads since and until (RFC 3339 times) and step (a duration
// such as 15m or 1h, or whole seconds) of the query.
func statsParams(r *http.Request) (*webhooks.StatsParams, error) {
	q := r.URL.Query()
	p := &webhooks.StatsParams{}
	for _, f := range []struct {
		name string
		to   *time.Time
	}{{"since", &p.Since}, {"until", &p.Until}} {
		v := q.Get(f.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, kindBadRequest, "%s: %q is not an RFC 3339 time such as 2026-12-01T08:00:00Z", f.name, v)
		}
		*f.to = t
	}
	if v := q.Get("step"); v != "" {
		d, err := parseStep(v)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, kindBadRequest, "step: %q is not a duration such as 15m or 1h, or a number of seconds", v)
		}
		p.Step = d
	}
	return p, nil
}

// parseStep reads a step as whole seconds or a Go duration.
func parseStep(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 1 || n > int64(webhooks.MaxStatsStep/time.Second) {
			return 0, errors.New("out of range")
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, errors.New("not a duration")
	}
	return d, nil
}
