// Package outbound builds and sends the HTTP requests of outgoing webhooks:
// the message (one event's envelope, or a JSON array of consecutive events
// for a subscription that takes batches), its Standard Webhooks signature
// under the subscription's secrets, the owner's custom headers, and the one
// HTTP client every delivery and test send goes through, which applies the
// egress policy at every dial and follows no redirect.
//
// It knows nothing of subscriptions' storage or of delivery state: the
// delivery engine and the test sender hand it a Target and a Message and
// get an Answer back.
package outbound
