// Package outbound is where a subscription's messages leave bothy: the
// destination port (Destination: send one message, answered Delivered,
// Retry or Gone), the message (one event's envelope, or a JSON array of
// consecutive events for an HTTP subscription that takes batches), its
// Standard Webhooks signature under the subscription's secrets (as HTTP
// headers, or Signed for a broker's message headers), the owner's custom
// headers, the one HTTP client every delivery and test send goes through
// (the egress policy at every dial, no redirect), and the registry of
// destination kinds (Kinds, Driver, Destinations), each kind a package of
// its own beside this one (httpdest, rabbitmq) wired in package kinds.
//
// It knows nothing of subscriptions' storage or of delivery state: the
// delivery engine and the test sender hand it a Target and a Message and
// get an Answer back.
package outbound
