package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/page"
	"github.com/bothy/bothy/services/server/internal/push"
)

type registrationJSON struct {
	ID        uuid.UUID `json:"id"`
	Principal string    `json:"principal"`
	Endpoint  string    `json:"endpoint"`
	UserAgent string    `json:"user_agent"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func registrationOut(g *push.Registration) registrationJSON {
	return registrationJSON{ID: g.ID, Principal: g.Principal, Endpoint: g.Endpoint, UserAgent: g.UserAgent,
		CreatedAt: g.CreatedAt, UpdatedAt: g.UpdatedAt}
}

// mayManageDevices: a principal manages only its own devices, with a
// token carrying push:manage (bare or for a space; deliveries still check
// the token's scopes per event at send time).
func mayManageDevices(s *authz.Subject) error {
	for _, sc := range s.Scopes {
		if base, _, _ := strings.Cut(sc, "@"); base == authz.ScopePushManage {
			return nil
		}
	}
	return errorf(http.StatusForbidden, kindForbidden, "push registrations need a token with scope %s", authz.ScopePushManage)
}

// vapidPublicKey answers the key clients pass as applicationServerKey when
// they subscribe, once push is configured.
func (a *API) vapidPublicKey(w http.ResponseWriter, _ *http.Request, _ *authz.Subject) error {
	if a.cfg.VAPIDPublicKey == "" {
		return errorf(http.StatusNotFound, kindNotFound, "push notifications are not configured (push.vapid_public_key)")
	}
	writeJSON(w, http.StatusOK, map[string]string{"public_key": a.cfg.VAPIDPublicKey})
	return nil
}

func (a *API) listRegistrations(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	if err := mayManageDevices(s); err != nil {
		return err
	}
	limit, after, err := pageParams(r, cursorRegistrations)
	if err != nil {
		return err
	}
	regs, err := a.registry.ListPage(r.Context(), a.pool, &push.ListPageParams{Principal: s.Principal,
		AfterCreatedAt: after.Time, AfterID: after.ID, Limit: limit + 1})
	if err != nil {
		return err
	}
	var next string
	if len(regs) > limit {
		regs = regs[:limit]
		next = page.Key{List: cursorRegistrations, Time: regs[limit-1].CreatedAt, ID: regs[limit-1].ID}.Encode()
	}
	out := make([]registrationJSON, 0, len(regs))
	for i := range regs {
		out = append(out, registrationOut(&regs[i]))
	}
	writeJSON(w, http.StatusOK, struct {
		Registrations []registrationJSON `json:"registrations"`
		NextCursor    string             `json:"next_cursor,omitempty"`
	}{out, next})
	return nil
}

type createRegistrationRequest struct {
	// Subscription is the browser's PushSubscription.toJSON().
	Subscription struct {
		Endpoint       string  `json:"endpoint"`
		ExpirationTime *uint64 `json:"expirationTime"`
		Keys           struct {
			P256dh string `json:"p256dh"`
			Auth   string `json:"auth"`
		} `json:"keys"`
	} `json:"subscription"`
	UserAgent string `json:"user_agent"`
}

func (a *API) createRegistration(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	if err := mayManageDevices(s); err != nil {
		return err
	}
	var req createRegistrationRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	var sub push.Subscription
	sub.Endpoint = req.Subscription.Endpoint
	sub.Keys.P256dh, sub.Keys.Auth = req.Subscription.Keys.P256dh, req.Subscription.Keys.Auth
	ua := req.UserAgent
	if ua == "" {
		ua = r.UserAgent()
		if len(ua) > 512 {
			ua = ua[:512]
		}
	}
	tokenID := s.TokenID
	// An endpoint another principal registered is refused, never taken
	// over (push.ErrEndpointTaken).
	reg, err := a.registry.Register(r.Context(), a.pool, &push.RegisterParams{Principal: s.Principal, Subscription: sub, UserAgent: ua, TokenID: &tokenID})
	if errors.Is(err, push.ErrInvalidRegistration) {
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "%v", err)
	}
	if errors.Is(err, push.ErrEndpointTaken) {
		return errorf(http.StatusConflict, kindConflict, "%v", err)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/push/registrations/"+reg.ID.String())
	writeJSON(w, http.StatusCreated, registrationOut(&reg))
	return nil
}

func (a *API) ownRegistration(r *http.Request, s *authz.Subject) (*push.Registration, error) {
	if err := mayManageDevices(s); err != nil {
		return nil, err
	}
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	reg, err := a.registry.Get(r.Context(), a.pool, id)
	if errors.Is(err, push.ErrNotFound) || (err == nil && reg.Principal != s.Principal) {
		return nil, errorf(http.StatusNotFound, kindNotFound, "no such push registration")
	}
	if err != nil {
		return nil, err
	}
	return &reg, nil
}

func (a *API) getRegistration(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	reg, err := a.ownRegistration(r, s)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, registrationOut(reg))
	return nil
}

func (a *API) deleteRegistration(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	reg, err := a.ownRegistration(r, s)
	if err != nil {
		return err
	}
	err = a.registry.Unregister(r.Context(), a.pool, s.Principal, reg.ID)
	if errors.Is(err, push.ErrNotFound) {
		return errorf(http.StatusNotFound, kindNotFound, "no such push registration")
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type preferenceJSON struct {
	Space  string `json:"space"`
	Notify bool   `json:"notify"`
}

func (a *API) getPreference(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	space, err := pathSpace(r)
	if err != nil {
		return err
	}
	if err := a.allow(r, s, authz.ActionPushManage, space); err != nil {
		return err
	}
	notify, err := a.registry.Preference(r.Context(), a.pool, s.Principal, space)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, preferenceJSON{Space: space, Notify: notify})
	return nil
}

type putPreferenceRequest struct {
	Notify *bool `json:"notify"`
}

func (a *API) putPreference(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	space, err := pathSpace(r)
	if err != nil {
		return err
	}
	if err := a.allow(r, s, authz.ActionPushManage, space); err != nil {
		return err
	}
	var req putPreferenceRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if req.Notify == nil {
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "notify is required: true or false")
	}
	if err := a.registry.SetPreference(r.Context(), a.pool, &push.SetPreferenceParams{Principal: s.Principal, Space: space, Notify: *req.Notify}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, preferenceJSON{Space: space, Notify: *req.Notify})
	return nil
}
