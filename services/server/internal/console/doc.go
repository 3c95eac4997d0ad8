// Package console is bothy's web console on the api role, under /console/:
// server-rendered pages (html/template, no build chain) over the HTTP API.
// It shows webhook subscriptions with their health (healthy, failing,
// disabled; last attempt, success rate), status, policy, lag and last
// delivery; a subscription's last 24 hours as a chart drawn on the server
// (inline SVG); its deliveries and attempts with status, latency and the
// receiver's response excerpt, found by status, event ID and creation time
// and paged both ways; a delivery's page with its event's data and, for
// each attempt, the request's headers (masked by the API) and the answer;
// forms to create and edit a subscription of any destination kind, which
// show the API's refusal next to the field it names and never a
// credential; the actions the API offers, each behind a
// confirmation page; a lag overview (the event log's consumers
// against its head, for tokens with ops:read, and each subscription's
// pending deliveries); and the signed-in principal's push registrations
// and preferences.
//
// The console decides nothing about rights. Every page is rendered from
// what the JSON API answers, served in process as the session's subject
// (httpapi.WithSubject), and every action is a call of the API's own
// endpoint the same way: a viewer sees and does exactly what the API lets
// their token see and do. The one narrowing on top is the portal's: a
// portal session shows only its principal's own subscriptions on its one
// space, and its subject's scopes are cut down to webhooks:manage there
// (and events:read there, if its token has it: a delivery's page then
// shows the message sent).
//
// # Sessions
//
// POST /console/sign-in exchanges a bearer token for a session cookie
// (bothy_console: HttpOnly, SameSite=Strict, Path /console/; Secure
// over TLS or with console.secure_cookies; a portal session with Secure
// cookies where console.frame_ancestors allows framing gets
// SameSite=None and Partitioned instead, which a cross-site frame can
// keep). The cookie holds a random id; the console_sessions table keeps
// its SHA-256, the token it rests on, the principal, the portal
// space and a CSRF secret. Every request re-reads the token and the
// principals: a revoked or expired token or a disabled principal ends the
// session at once. Signing in again (or opening a portal link) deletes
// the session the browser's cookie held before. Every form carries a CSRF token (field csrf); a POST
// without the session's token, or from another origin, is refused with
// 403 before anything is done. GET /console/portal?token=... exchanges a
// portal link (package portallink; issued by POST /v1/portal-links) for a
// portal session of an hour at most; each link opens once (the hashes of
// used links are kept until they expire). A browser signed in to the
// console is asked first, as opening the link ends its session; the
// confirmation posts the link to POST /console/portal. A link followed
// from another site (Fetch Metadata) first gets a page that reloads it
// from the console, so the SameSite=Strict cookie comes with it.
//
// Every answer has Content-Security-Policy "default-src 'self'; base-uri
// 'none'; form-action 'self'; object-src 'none'; frame-ancestors 'none'"
// (portal pages: frame-ancestors from console.frame_ancestors), so no
// inline script or style runs; everything a receiver sent is rendered as
// text by html/template. Times are <time datetime="RFC 3339"> with UTC
// text; static/time.js shows them in the viewer's locale, and
// static/destination.js shows only the chosen destination kind's fieldset
// of the subscription form (every page works without them).
//
// # Configuration
//
// console.enabled=true mounts the console; console.key (at least 32
// characters) is then required. console.frame_ancestors,
// console.session_ttl and console.secure_cookies (for a console behind a
// TLS-terminating proxy) are optional.
//
// # Stable hooks for browser tests
//
// Pages keep these ids and data-testid attributes:
//
//   - every page: header nav#nav with a#nav-subscriptions, a#nav-lag,
//     a#nav-push (not in portal sessions); span#principal; in portal
//     sessions span#portal-banner; otherwise form#sign-out-form with
//     button#sign-out. Every time is time[data-testid=time][datetime].
//     Empty lists show an element with data-testid=empty-state saying what
//     to do.
//   - sign-in (/console/sign-in): form#sign-in-form, input#token,
//     button#sign-in-submit; p#sign-in-error after a refused token.
//   - subscriptions (/console/subscriptions[?space=][&limit=]):
//     a#new-subscription; form#space-filter with input#space;
//     table#subscriptions with rows
//     tr[data-testid=subscription-row][data-id=ID] holding
//     a[data-testid=subscription-link] and cells data-testid health-badge
//     (healthy, failing or disabled), last-attempt, success-rate (the last
//     24 hours), subscription-status, subscription-policy,
//     subscription-lag, subscription-last-delivered; p#empty-subscriptions;
//     a[data-testid=page-size]; nav#pager with a#first-page, a#prev-page,
//     a#next-page.
//   - a subscription (/console/subscriptions/ID[?status=&event_id=&type=
//     &since=&until=&limit=&cursor=&back=]): p#saved-message after an edit;
//     h1#subscription-url; dd#subscription-id, #subscription-space,
//     #subscription-owner, #subscription-destination (the kind and a
//     broker's fields, credentials masked), #subscription-status, #subscription-policy,
//     #subscription-rate, #subscription-max-batch, #subscription-lag,
//     #subscription-last-delivered; ul#actions with a#action-edit and
//     a[data-testid=action-NAME] for NAME in enable or disable, test,
//     rotate-secret, recover, delete; div#charts with
//     figure#chart-attempts (span[data-testid=chart-summary],
//     div.chart-wide and div.chart-narrow, each with an svg[role=img], one
//     of them shown) or p#empty-charts; form#delivery-filter with
//     select#status, input#event-id, input#event-type (a type pattern),
//     input#since and input#until (datetime-local, UTC), select#limit,
//     button#delivery-filter-submit,
//     a#delivery-filter-clear; p#filter-error when the API refuses the
//     filter; table#deliveries with tr[data-testid=delivery-row]
//     [data-seq=SEQ] (link a[data-testid=delivery-link], cell
//     data-testid=delivery-status, link a[data-testid=action-resend]) each
//     followed by its tr[data-testid=attempt-row] (cells attempt-status,
//     attempt-latency, pre[data-testid=response-excerpt]);
//     p#empty-deliveries; nav#pager as above.
//   - a delivery (/console/subscriptions/ID/deliveries/SEQ):
//     h1#delivery-title; dd#delivery-status, #delivery-event-id,
//     #delivery-event-type, #delivery-attempts, #delivery-resent (after
//     a resend); pre#message-body (the
//     event's data) or p#message-missing; ol#attempts with
//     li[data-testid=attempt] (attempt-status, attempt-latency,
//     details[data-testid=attempt-request] holding
//     table[data-testid=request-headers] with
//     tr[data-testid=request-header][data-name=NAME], or
//     p[data-testid=attempt-no-request] when none was sent;
//     pre[data-testid=response-excerpt]); p#empty-attempts.
//   - create and edit (/console/subscriptions/new,
//     /console/subscriptions/ID/edit): form#subscription-form with
//     fields f-NAME inside div#field-NAME for NAME in space, url,
//     event_types, headers, policy, auto_recover, max_in_flight,
//     max_requests_per_second, max_batch, retry_base_seconds,
//     retry_max_seconds, retry_budget_seconds (the API's names); the
//     destination's select#f-kind in div#field-kind, then
//     fieldset.destination[data-kind=KIND]#destination-KIND for http
//     (holding div#field-url) and each broker kind, with inputs
//     f-KIND-FIELD named KIND.FIELD in div#field-KIND-FIELD (a kind's
//     fields as outbound.Driver.Fields lists them), and
//     strong[data-testid=retype] when a typed credential is shown masked;
//     the API's refusal of a field in div#field-NAME (a destination's
//     field: div#field-KIND-FIELD of the chosen kind) p.field-error, of
//     the form in p#form-error; checkboxes input[name=remove_header] (edit);
//     button#form-submit, a#form-cancel. Creating shows the result page
//     with the secret.
//   - confirmation (/console/subscriptions/ID/confirm/NAME[?seq=]):
//     p#confirm-question, form#confirm-form (input#reason for disable,
//     radio inputs name=from for enable, input#from-seq, input#to-seq and
//     (not in portal sessions) input#before-creation
//     for recover), button#confirm-submit,
//     a#confirm-cancel.
//   - result of an action: p#result-message; code#new-secret after a
//     rotation; dl#test-result (test-status, test-latency,
//     pre[data-testid=response-excerpt]) after a test send; a#result-back.
//   - lag (/console/lag): with scope ops:read, table#consumers with
//     tr[data-testid=consumer-row][data-name=NAME] and cells data-testid
//     consumer-last-seq, consumer-head, consumer-lag, consumer-pending-age,
//     consumer-last-round, consumer-lost; without it p#consumers-scope naming the scope
//     (neither in portal sessions); then table#lag with
//     tr[data-testid=lag-row] and cells lag-pending; p#empty-lag.
//   - push (/console/push[?space=]): table#registrations with
//     tr[data-testid=registration-row]; p#empty-registrations or
//     p#push-problem; form#preference-form with input#pref-space;
//     p#preference and form#preference-set-form with
//     button#preference-toggle (turns notifications of the space on or
//     off, no confirmation).
//   - portal link over a signed-in session (/console/portal?token=):
//     p#portal-question, form#portal-form, button#portal-open,
//     a#portal-cancel.
//   - portal link followed from another site: p#portal-continue-note,
//     a#portal-continue (the page reloads itself).
//   - errors: h1#error-title, p#error-detail.
package console
