package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// policies are the delivery policies the API takes, in the order the form
// offers them.
var policies = []struct{ Name, Label string }{
	{"ordered", "ordered: in seq order; a failing receiver disables the subscription"},
	{"ordered_dead_letter", "ordered, dead letter: in seq order; a delivery out of retries is set aside"},
	{"unordered", "unordered: several at once; a delivery out of retries is set aside"},
}

// formFields are the fields of the subscription form, named as the API
// names them in a problem's detail ("max_batch: ..."), so the API's
// answer is shown next to its field.
var formFields = []string{"space", "url", "event_types", "headers", "filter", "transform", "policy", "max_in_flight",
	"max_requests_per_second", "max_batch", "auto_recover", "retry_base_seconds", "retry_max_seconds", "retry_budget_seconds"}

// numberFields are the form's numeric policy fields: whole numbers, or
// (Decimal) seconds and rates.
var numberFields = []struct {
	Name    string
	Decimal bool
}{
	{"max_in_flight", false}, {"max_requests_per_second", true}, {"max_batch", false},
	{"retry_base_seconds", true}, {"retry_max_seconds", true}, {"retry_budget_seconds", true},
}

// subscriptionForm is the create and edit form: the values as typed, and
// the errors by field ("" for the form as a whole).
type subscriptionForm struct {
	// Sub is the subscription being edited; nil on create.
	Sub *subscriptionView
	// FixedSpace is the portal's space, which a portal session cannot
	// change.
	FixedSpace string
	Values     map[string]string
	// Headers lists the subscription's custom headers with masked values
	// (edit only); RemoveHeaders those the form asks to remove.
	Headers       map[string]string
	RemoveHeaders map[string]bool
	Errors        map[string]string
	Policies      []struct{ Name, Label string }
	// Retype says a credential typed into the form is shown masked: it
	// must be entered again, or the stored one is kept.
	Retype bool
	// Preview is what the typed filter and transform make of the space's
	// recent events (edit only, after the Preview button); nil otherwise.
	Preview *previewView
}

func newSubscriptionForm(s *session, sub *subscriptionView) *subscriptionForm {
	f := &subscriptionForm{Sub: sub, FixedSpace: s.portalSpace, Values: map[string]string{"policy": "ordered", "kind": "http"},
		RemoveHeaders: map[string]bool{}, Errors: map[string]string{}, Policies: policies}
	if sub == nil {
		f.Values["space"] = s.portalSpace
		return f
	}
	f.Headers = sub.Headers
	f.Values["space"], f.Values["url"] = sub.Space, sub.URL
	f.setDestination(sub)
	f.Values["event_types"] = strings.Join(sub.EventTypes, ", ")
	f.Values["policy"] = sub.Policy
	f.Values["filter"], f.Values["transform"] = sub.Filter, sub.Transform
	if sub.AutoRecover {
		f.Values["auto_recover"] = "on"
	}
	setNumber := func(name string, v float64) {
		if v != 0 {
			f.Values[name] = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	setNumber("max_in_flight", float64(sub.MaxInFlight))
	setNumber("max_batch", float64(sub.MaxBatch))
	for name, v := range map[string]*float64{"max_requests_per_second": sub.MaxRequestsPerSecond,
		"retry_base_seconds": sub.RetryBaseSeconds, "retry_max_seconds": sub.RetryMaxSeconds,
		"retry_budget_seconds": sub.RetryBudgetSeconds} {
		if v != nil {
			setNumber(name, *v)
		}
	}
	return f
}

// read takes the posted values into f and builds the API's request body:
// a create's (every field given) or an update's (sub set: every field,
// an emptied number returning to the server's default, headers as a merge
// patch). A value the console cannot even send is an error on its field.
// The values kept in f for showing the form again have their credentials
// masked.
func (f *subscriptionForm) read(r *http.Request) map[string]any {
	body := map[string]any{}
	for _, k := range formFields {
		f.Values[k] = strings.TrimSpace(r.PostFormValue(k))
	}
	if f.FixedSpace != "" {
		f.Values["space"] = f.FixedSpace
	}
	if f.Sub == nil {
		body["space"] = f.Values["space"]
	}
	f.readDestination(r, body)
	defer f.maskCredentials()
	types := strings.FieldsFunc(f.Values["event_types"], func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
	if types == nil {
		types = []string{}
	}
	body["event_types"] = types
	body["filter"], body["transform"] = f.Values["filter"], f.Values["transform"]
	body["policy"] = f.Values["policy"]
	body["auto_recover"] = f.Values["auto_recover"] != ""
	for _, n := range numberFields {
		v := f.Values[n.Name]
		if v == "" {
			if f.Sub != nil {
				body[n.Name] = 0 // the server's default again
			}
			continue
		}
		if n.Decimal {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				f.Errors[n.Name] = n.Name + ": want a number"
				continue
			}
			body[n.Name] = x
		} else {
			x, err := strconv.Atoi(v)
			if err != nil {
				f.Errors[n.Name] = n.Name + ": want a whole number"
				continue
			}
			body[n.Name] = x
		}
	}
	headers := map[string]any{}
	for _, line := range strings.Split(f.Values["headers"], "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) == "" {
			f.Errors["headers"] = "headers: want one “Name: value” a line"
			break
		}
		headers[strings.TrimSpace(name)] = strings.TrimSpace(value)
	}
	if f.Sub != nil {
		for _, name := range r.PostForm["remove_header"] {
			if _, ok := f.Headers[name]; ok {
				f.RemoveHeaders[name] = true
				headers[name] = nil // a merge patch removes it
			}
		}
	}
	if len(headers) > 0 {
		body["headers"] = headers
	}
	return body
}

// fieldOf names the form field a problem's detail is about: the field
// named first (as "name:" or "name." after the start or a space; a
// destination's field as "destination.name"), "" for none.
func fieldOf(detail string) string {
	best, at := "", len(detail)
	for _, name := range slices.Concat(destinationFields, formFields) {
		for _, sep := range []string{":", "."} {
			i := 0
			for {
				j := strings.Index(detail[i:], name+sep)
				if j < 0 {
					break
				}
				j += i
				if (j == 0 || detail[j-1] == ' ') && j < at {
					best, at = name, j
				}
				i = j + 1
			}
		}
	}
	return best
}

// fail shows a refused request next to its field: the API's 400, 403 and
// 422 answers keep the form; others are the console's error page.
func (f *subscriptionForm) fail(err error) error {
	var pe *pageError
	if !errors.As(err, &pe) || !slices.Contains([]int{http.StatusBadRequest, http.StatusForbidden, http.StatusUnprocessableEntity}, pe.status) {
		return err
	}
	f.Errors[f.shownAt(fieldOf(pe.detail))] = pe.detail
	return nil
}

func (c *Console) newSubscription(w http.ResponseWriter, r *http.Request, s *session) error {
	f := newSubscriptionForm(s, nil)
	if v := r.URL.Query().Get("space"); v != "" && s.portalSpace == "" {
		f.Values["space"] = v
	}
	c.render(w, r, s, http.StatusOK, "subscription-form", f)
	return nil
}

// createSubscription creates a subscription through the API as the
// session's subject and shows its secret once; a refused field keeps the
// form, with the API's detail next to the field.
func (c *Console) createSubscription(w http.ResponseWriter, r *http.Request, s *session) error {
	f := newSubscriptionForm(s, nil)
	body := f.read(r)
	if len(f.Errors) == 0 {
		var created struct {
			subscriptionView
			Secret string `json:"secret"`
		}
		err := c.call(r, s, http.MethodPost, "/v1/webhooks", body, &created)
		if err == nil {
			c.render(w, r, s, http.StatusOK, "result", &resultData{Sub: &created.subscriptionView, Secret: created.Secret,
				Message: "The subscription was created. Copy its signing secret now: it is not shown again."})
			return nil
		}
		if err := f.fail(err); err != nil {
			return err
		}
	}
	c.render(w, r, s, http.StatusUnprocessableEntity, "subscription-form", f)
	return nil
}

func (c *Console) editSubscription(w http.ResponseWriter, r *http.Request, s *session) error {
	sub, err := c.getSubscription(r, s)
	if err != nil {
		return err
	}
	c.render(w, r, s, http.StatusOK, "subscription-form", newSubscriptionForm(s, sub))
	return nil
}

// updateSubscription changes a subscription through the API (PATCH) and
// shows it; the subscription is read first, so a portal session cannot
// change one it may not see.
func (c *Console) updateSubscription(w http.ResponseWriter, r *http.Request, s *session) error {
	sub, err := c.getSubscription(r, s)
	if err != nil {
		return err
	}
	f := newSubscriptionForm(s, sub)
	body := f.read(r)
	if r.PostFormValue("preview") != "" {
		return c.previewSubscription(w, r, s, f)
	}
	if len(f.Errors) == 0 {
		err := c.call(r, s, http.MethodPatch, "/v1/webhooks/"+url.PathEscape(sub.ID), body, nil)
		if err == nil {
			http.Redirect(w, r, Prefix+"subscriptions/"+url.PathEscape(sub.ID)+"?saved=1", http.StatusSeeOther)
			return nil
		}
		if err := f.fail(err); err != nil {
			return err
		}
	}
	c.render(w, r, s, http.StatusUnprocessableEntity, "subscription-form", f)
	return nil
}

// previewSubscription shows the edit form as typed with what its filter
// and transform make of the space's recent events (the API's preview),
// saving nothing; a refused expression is shown next to its field.
func (c *Console) previewSubscription(w http.ResponseWriter, r *http.Request, s *session, f *subscriptionForm) error {
	body := map[string]any{"filter": f.Values["filter"], "transform": f.Values["transform"]}
	var v previewView
	err := c.call(r, s, http.MethodPost, "/v1/webhooks/"+url.PathEscape(f.Sub.ID)+"/preview", body, &v)
	if err == nil {
		for i := range v.Results { // as sent: the API's answer is indented
			var b bytes.Buffer
			if json.Compact(&b, v.Results[i].Body) == nil {
				v.Results[i].Body = b.Bytes()
			}
		}
		f.Preview = &v
		c.render(w, r, s, http.StatusOK, "subscription-form", f)
		return nil
	}
	if err := f.fail(err); err != nil {
		return err
	}
	c.render(w, r, s, http.StatusUnprocessableEntity, "subscription-form", f)
	return nil
}
