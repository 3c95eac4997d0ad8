// Package delivery is the engine of outgoing webhooks: one sender per
// subscription works through its pending deliveries in batches. One short
// transaction records the last batch's outcomes and claims the next one
// with its events and the owner's right to them; the requests go out with
// no transaction open, in seq order for the ordered policies and up to
// max_in_flight at once for unordered ones; what a failure does (retry,
// dead letter, disable, probe) is the subscription's policy. Rights are
// decided again before a request starts once the decision is older than
// webhooks.rights_max_age. Failures are retried with backoff until the
// retry budget is spent; a 410, a spent budget under the ordered policy or
// a gap (events removed by retention before delivery) disables the
// subscription.
//
// Neither secrets nor target URLs appear in logs or metrics.
package delivery
