// Package jetstream is the NATS JetStream destination: a subscription's
// messages published on a subject made from a template, each stored by
// the stream that takes the subject.
//
// A message carries the Standard Webhooks headers (outbound.Signed) as
// NATS headers, so a consumer verifies it as a webhook: the payload is the
// body, webhook-id, webhook-timestamp and webhook-signature the headers.
// Nats-Msg-Id is the message's id, so a stream drops a repeat within its
// duplicate window (the stream's duplicate_window, two minutes by
// default) and acknowledges it as a duplicate; Send counts that as
// Delivered. A repeat after the window is stored again: consumers that
// must not see one twice deduplicate by webhook-id, as HTTP receivers do.
// A resend (the owner asked for a delivery to be sent again) is a new
// message: its Nats-Msg-Id is the id followed by ".r" and the resend's
// time in Unix nanoseconds, so it is stored again and its own repeats are
// dropped; its webhook-id is still the event's.
// Subscription headers named Nats-* are left out: JetStream acts on them.
//
// Delivered means the stream's PubAck: the message is stored (on disk for
// a file stream, replicated for a replicated one). No stream taking the
// subject, another stream than the configured one, an outage, a lost
// connection or no PubAck within the attempt's time are Retry, with the
// reason. The connection (one per server URL and credentials, Pool)
// does not reconnect by itself and buffers nothing: a lost one is
// replaced by a new dial, so no publish outlives the Send that made it.
package jetstream
