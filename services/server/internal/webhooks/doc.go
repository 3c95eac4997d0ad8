// Package webhooks sends bothy's events to outside HTTP receivers
// (docs/adr/0016-outgoing-webhooks.md).
//
// The webhooks consumer turns each round of the event log into delivery rows
// (unique per subscription and seq) and delivery jobs, in the round's
// transaction. A delivery job becomes the one sender of its subscription and
// sends its pending deliveries strictly in seq order, signed with the
// Standard Webhooks scheme, after checking webhook_out.deliver with the
// owner's current rights and scopes. Failures are retried with backoff
// until the retry budget is spent; a 410, a spent budget or a gap (events
// removed by retention before delivery) disables the subscription.
//
// No transaction is open during an HTTP request, every outgoing connection
// re-checks the address it dials, and neither secrets nor target URLs
// appear in logs or metrics.
package webhooks
