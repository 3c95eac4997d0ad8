package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// action is something the API offers on a subscription, done from a
// confirmation page.
type action struct {
	// Label names the action on buttons.
	Label string
	// Question is asked on the confirmation page.
	Question string
	// NeedsSeq actions are about one delivery (the form's seq).
	NeedsSeq bool
}

var actions = map[string]action{
	"enable":        {Label: "Enable", Question: "Enable this subscription? Choose where delivery resumes."},
	"disable":       {Label: "Disable", Question: "Disable this subscription? Nothing is delivered until it is enabled again."},
	"rotate-secret": {Label: "Rotate secret", Question: "Rotate the signing secret? The old one keeps signing for 24 hours as well; the new one is shown once."},
	"recover":       {Label: "Recover", Question: "Send the dead and missing deliveries of a range of seqs again?"},
	"test":          {Label: "Send test", Question: "Send a signed test message to the receiver now?"},
	"delete":        {Label: "Delete", Question: "Delete this subscription with its delivery records? This cannot be undone."},
	"resend":        {Label: "Resend", Question: "Send this delivery again?", NeedsSeq: true},
}

type confirmData struct {
	Sub    *subscriptionView
	Name   string
	Action action
	Seq    string
}

func (c *Console) confirm(w http.ResponseWriter, r *http.Request, s *session) error {
	name := r.PathValue("action")
	a, ok := actions[name]
	if !ok {
		return errorf(http.StatusNotFound, "no action %q", name)
	}
	sub, err := c.getSubscription(r, s)
	if err != nil {
		return err
	}
	d := &confirmData{Sub: sub, Name: name, Action: a}
	if a.NeedsSeq {
		seq, err := strconv.ParseInt(r.URL.Query().Get("seq"), 10, 64)
		if err != nil || seq < 1 {
			return errorf(http.StatusBadRequest, "seq: want a delivery's seq")
		}
		d.Seq = strconv.FormatInt(seq, 10)
	}
	c.render(w, r, s, http.StatusOK, "confirm", d)
	return nil
}

type resultData struct {
	Sub     *subscriptionView
	Message string
	// Secret is a new signing secret, shown once.
	Secret string
	// Test is the outcome of a test send.
	Test *testSendView
	// Deleted is set once the subscription is gone.
	Deleted bool
}

// act does a confirmed action through the API, as the session's subject.
// The subscription is read first, so a portal session cannot act on one it
// may not see.
func (c *Console) act(w http.ResponseWriter, r *http.Request, s *session) error {
	name := r.PathValue("action")
	if _, ok := actions[name]; !ok {
		return errorf(http.StatusNotFound, "no action %q", name)
	}
	sub, err := c.getSubscription(r, s)
	if err != nil {
		return err
	}
	d := &resultData{Sub: sub}
	if err := c.doAction(r, s, name, "/v1/webhooks/"+url.PathEscape(sub.ID), d); err != nil {
		return err
	}
	c.render(w, r, s, http.StatusOK, "result", d)
	return nil
}

// doAction calls the API for the action name on the subscription at path
// and says in d what it did.
func (c *Console) doAction(r *http.Request, s *session, name, path string, d *resultData) error {
	switch name {
	case "enable":
		return c.actEnable(r, s, path, d)
	case "disable":
		if err := c.call(r, s, http.MethodPost, path+"/disable", map[string]string{"reason": r.PostFormValue("reason")}, nil); err != nil {
			return err
		}
		d.Message = "Disabled. Enable it again to resume delivery."
	case "rotate-secret":
		var out struct {
			Secret string `json:"secret"`
		}
		if err := c.call(r, s, http.MethodPost, path+"/rotate-secret", map[string]any{}, &out); err != nil {
			return err
		}
		d.Message, d.Secret = "The secret was rotated. Copy the new one now: it is not shown again.", out.Secret
	case "recover":
		return c.actRecover(r, s, path, d)
	case "test":
		var out testSendView
		if err := c.call(r, s, http.MethodPost, path+"/test", map[string]any{}, &out); err != nil {
			return err
		}
		d.Message, d.Test = "Test message sent.", &out
	case "delete":
		if err := c.call(r, s, http.MethodDelete, path, nil, nil); err != nil {
			return err
		}
		d.Message, d.Deleted = "The subscription was deleted.", true
	case "resend":
		return c.actResend(r, s, path, d)
	}
	return nil
}

// actEnable enables the subscription from where the form says: the
// backlog, or else the head.
func (c *Console) actEnable(r *http.Request, s *session, path string, d *resultData) error {
	from := r.PostFormValue("from")
	if from != "backlog" {
		from = "head"
	}
	var out struct {
		Created int64 `json:"created"`
		Skipped int64 `json:"skipped"`
	}
	if err := c.call(r, s, http.MethodPost, path+"/enable", map[string]string{"from": from}, &out); err != nil {
		return err
	}
	d.Message = fmt.Sprintf("Enabled from the %s: %d deliveries created, %d events skipped.", from, out.Created, out.Skipped)
	return nil
}

// actRecover recovers the range of seqs the form gives.
func (c *Console) actRecover(r *http.Request, s *session, path string, d *resultData) error {
	body, err := recoverBody(r)
	if err != nil {
		return err
	}
	var out struct {
		Reset   int64 `json:"reset"`
		Created int64 `json:"created"`
	}
	if err := c.call(r, s, http.MethodPost, path+"/recover", body, &out); err != nil {
		return err
	}
	d.Message = fmt.Sprintf("Recovery started: %d dead deliveries reset, %d created.", out.Reset, out.Created)
	return nil
}

// recoverBody is the API request of a recover: the form's from_seq and
// to_seq, each only if given (the API starts at the subscription's
// creation without from_seq), and before_creation if checked.
func recoverBody(r *http.Request) (map[string]any, error) {
	body := map[string]any{}
	for _, k := range []string{"from_seq", "to_seq"} {
		if v := r.PostFormValue(k); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, errorf(http.StatusBadRequest, "%s: want a seq", k)
			}
			body[k] = n
		}
	}
	if r.PostFormValue("before_creation") == "true" {
		body["before_creation"] = true
	}
	return body, nil
}

// actResend sends the form's delivery again.
func (c *Console) actResend(r *http.Request, s *session, path string, d *resultData) error {
	seq, err := seqOf(r)
	if err != nil {
		return err
	}
	if err := c.call(r, s, http.MethodPost, fmt.Sprintf("%s/deliveries/%d/resend", path, seq), map[string]any{}, nil); err != nil {
		return err
	}
	d.Message = fmt.Sprintf("Delivery %d is queued to be sent again.", seq)
	return nil
}
