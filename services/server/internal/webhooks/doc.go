// Package webhooks manages bothy's outgoing webhook subscriptions
// (docs/adr/0016-outgoing-webhooks.md): creating, changing, listing,
// enabling, disabling, recovering and resending them for the HTTP API, the
// CLI and the console, and the views they show.
//
// The webhooks consumer turns each round of the event log into delivery
// rows (unique per subscription and seq) and makes sure every subscription
// that got some has a sender: it wakes the live sender, or enqueues a
// delivery job when none holds the subscription. The sender itself is
// package delivery; the HTTP requests, their signature and the client are
// package outbound.
package webhooks
