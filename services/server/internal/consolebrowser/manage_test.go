package consolebrowser

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// subscriptionPolicy is the API's view of a subscription's settings, as
// far as the form tests check them.
type subscriptionPolicy struct {
	Space                string            `json:"space"`
	Owner                string            `json:"owner"`
	URL                  string            `json:"url"`
	EventTypes           []string          `json:"event_types"`
	Headers              map[string]string `json:"headers"`
	Policy               string            `json:"policy"`
	MaxInFlight          int               `json:"max_in_flight"`
	MaxRequestsPerSecond *float64          `json:"max_requests_per_second"`
	MaxBatch             int               `json:"max_batch"`
	Filter               string            `json:"filter"`
}

func (f *fixture) policyOf(t *testing.T, token, id string) *subscriptionPolicy {
	t.Helper()
	var sub subscriptionPolicy
	require.Equal(t, http.StatusOK, f.api(t, http.MethodGet, "/v1/webhooks/"+id, token, nil, &sub))
	return &sub
}

// fill replaces the value of the form field name (input or textarea
// f-NAME) with value, typed as a person would.
func fill(name, value string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tgt *chromedp.Target) (chromedp.Void, error) {
		if _, err := setValue("f-"+name, "")(ctx, tgt); err != nil {
			return chromedp.Void{}, err
		}
		if value == "" {
			return chromedp.Void{}, nil
		}
		return chromedp.SendKeys(chromedp.ID("f-"+name), value)(ctx, tgt)
	}
}

// setValue sets the value of the element with id, as choosing an option
// of a select does.
func setValue(id, value string) chromedp.Action[chromedp.Void] {
	set := chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
		const e = document.getElementById(%q);
		if (!e) throw new Error("no element #" + %q);
		e.value = %q;
		e.dispatchEvent(new Event("change", {bubbles: true}));
		return true;
	})()`, id, id, value))
	return func(ctx context.Context, tgt *chromedp.Target) (chromedp.Void, error) {
		_, err := set(ctx, tgt)
		return chromedp.Void{}, err
	}
}

// fieldError is the error shown next to the form field name, "" for none.
func fieldError(b *Browser, name string) string {
	return Run(b, chromedp.Evaluate[string](`(document.querySelector("#field-`+name+` .field-error")?.innerText ?? "")`))
}

// TestConsole_CreateAndEditSubscription creates a subscription from the
// console's form and edits it: a value the API refuses is shown next to its
// field with the form kept as typed, and what was saved is what the API
// shows afterwards. A portal session creates on its own space only.
func TestConsole_CreateAndEditSubscription(t *testing.T) {
	t.Parallel()
	f := setup(t)
	b := New(t)
	signIn(f, b, f.aliceToken)
	var id string

	t.Run("Create", func(t *testing.T) {
		b := b.For(t)
		b.Do(chromedp.Click(chromedp.ID("new-subscription")), shows("#subscription-form"))
		require.Equal(t, "New subscription", heading(b))
		b.Do(
			fill("space", "acme"),
			fill("url", f.receiver.srv.Base()+"/created"),
			fill("event_types", "item.*, order.created"),
			fill("headers", "X-Team: payments"),
			setValue("f-policy", "ordered_dead_letter"),
			fill("max_requests_per_second", "5"),
			fill("max_batch", "5000"),
		)
		b.Screenshot("create-form")
		b.DocScreenshot("create-form", 1000, false)
		b.Do(chromedp.Click(chromedp.ID("form-submit")), shows("#field-max_batch .field-error"))
		// The API's refusal, next to its field; the other fields as typed.
		require.Contains(t, fieldError(b, "max_batch"), "max_batch: 5000")
		require.Empty(t, fieldError(b, "url"))
		require.Equal(t, f.receiver.srv.Base()+"/created", Run(b, chromedp.Evaluate[string](`document.getElementById("f-url").value`)))
		require.Equal(t, "ordered_dead_letter", Run(b, chromedp.Evaluate[string](`document.getElementById("f-policy").value`)))
		b.Screenshot("create-form-refused")
		b.DocScreenshot("create-form-error", 1000, false)

		b.Do(fill("max_batch", "10"), chromedp.Click(chromedp.ID("form-submit")), shows(`[data-testid="new-secret"]`))
		require.True(t, strings.HasPrefix(text(b, `[data-testid="new-secret"]`), "whsec_"))
		b.Do(chromedp.Click(chromedp.ID("result-back")), shows("#subscription-id"))
		id = text(b, "#subscription-id")
		require.Contains(t, text(b, "#subscription-rate"), "5 requests per second")
		require.Contains(t, text(b, "#subscription-max-batch"), "10 events per request")

		sub := f.policyOf(t, f.aliceToken, id)
		require.Equal(t, "acme", sub.Space)
		require.Equal(t, "alice", sub.Owner)
		require.Equal(t, []string{"item.*", "order.created"}, sub.EventTypes)
		require.Equal(t, "ordered_dead_letter", sub.Policy)
		require.Equal(t, 10, sub.MaxBatch)
		require.NotNil(t, sub.MaxRequestsPerSecond)
		require.InDelta(t, 5, *sub.MaxRequestsPerSecond, 1e-9)
		require.Contains(t, sub.Headers, "X-Team")
	})

	t.Run("RefusedSpace", func(t *testing.T) {
		b := b.For(t)
		b.Do(chromedp.Navigate(f.base+"/console/subscriptions/new"), shows("#subscription-form"),
			fill("space", "globex"), fill("url", f.receiver.srv.Base()+"/x"),
			chromedp.Click(chromedp.ID("form-submit")), shows("#form-error"))
		require.Contains(t, text(b, "#form-error"), `no right on space "globex"`)
	})

	t.Run("Edit", func(t *testing.T) {
		require.NotEmpty(t, id, "Create made the subscription")
		b := b.For(t)
		openSubscription(f, b, id)
		b.Do(chromedp.Click(chromedp.ID("action-edit")), shows("#subscription-form"))
		require.Equal(t, "Edit subscription", heading(b))
		require.Equal(t, "10", Run(b, chromedp.Evaluate[string](`document.getElementById("f-max_batch").value`)))

		// Unordered with a batch: the API names max_batch.
		b.Do(setValue("f-policy", "unordered"), chromedp.Click(chromedp.ID("form-submit")),
			shows("#field-max_batch .field-error"))
		require.Contains(t, fieldError(b, "max_batch"), "only with the ordered policies")
		b.Screenshot("edit-form-refused")

		b.Do(
			fill("max_batch", ""),
			fill("max_in_flight", "4"),
			fill("max_requests_per_second", ""),
			chromedp.Click(chromedp.CSS(`input[name="remove_header"][value="X-Team"]`)),
			chromedp.Click(chromedp.ID("form-submit")),
			shows("#saved-message"),
		)
		sub := f.policyOf(t, f.aliceToken, id)
		require.Equal(t, "unordered", sub.Policy)
		require.Equal(t, 4, sub.MaxInFlight)
		require.Zero(t, sub.MaxBatch)
		require.Nil(t, sub.MaxRequestsPerSecond, "an emptied field returns to the server's default")
		require.Empty(t, sub.Headers)
		require.Contains(t, text(b, "#subscription-policy"), "at most 4 in flight")
	})

	t.Run("Portal", func(t *testing.T) {
		admin := f.principal(t, "acme-admin", authz.RightAdmin, "acme")
		carol := f.principal(t, "carol", authz.RightWrite, "acme")
		carolSub := f.createSubscription(t, carol, "acme")

		// A link carol issued herself: she creates on the portal's space,
		// whatever the form is made to say.
		b := New(t)
		b.Do(chromedp.Navigate(portalLink(t, f, carol, "carol")), shows(`[data-testid="portal-banner"]`),
			chromedp.Click(chromedp.ID("new-subscription")), shows("#subscription-form"))
		require.True(t, Run(b, chromedp.Evaluate[bool](`document.getElementById("f-space").readOnly`)))
		require.Equal(t, "acme", Run(b, chromedp.Evaluate[string](`document.getElementById("f-space").value`)))
		b.Do(setValue("f-space", "globex"), fill("url", f.receiver.srv.Base()+"/carol"),
			chromedp.Click(chromedp.ID("form-submit")), shows(`[data-testid="new-secret"]`),
			chromedp.Click(chromedp.ID("result-back")), shows("#subscription-id"))
		sub := f.policyOf(t, carol, text(b, "#subscription-id"))
		require.Equal(t, "acme", sub.Space)
		require.Equal(t, "carol", sub.Owner)
		// Another principal's subscription cannot be edited from the portal.
		b.Do(chromedp.Navigate(f.base+"/console/subscriptions/"+f.aliceSub+"/edit"), shows("#error-detail"))
		require.Contains(t, heading(b), "404")

		// A link an admin issued for carol rests on the admin's token: the
		// API lets it change carol's subscription but not create one for
		// her, and the form says so.
		b = New(t)
		b.Do(chromedp.Navigate(portalLink(t, f, admin, "carol")), shows(`[data-testid="portal-banner"]`))
		b.Do(chromedp.Navigate(f.base+"/console/subscriptions/"+carolSub+"/edit"), shows("#subscription-form"),
			fill("url", f.receiver.srv.Base()+"/carol-edited"), chromedp.Click(chromedp.ID("form-submit")), shows("#saved-message"))
		require.Equal(t, f.receiver.srv.Base()+"/carol-edited", f.policyOf(t, carol, carolSub).URL)
		b.Do(chromedp.Navigate(f.base+"/console/subscriptions/new"), shows("#subscription-form"),
			fill("url", f.receiver.srv.Base()+"/carol2"), chromedp.Click(chromedp.ID("form-submit")), shows("#form-error"))
		require.Contains(t, text(b, "#form-error"), "another principal")
	})
}
