// Package push delivers Web Push notifications: it keeps a
// principal's devices as standard push subscriptions with per-space
// preferences (Registry), turns committed events into push.deliver jobs in
// the round of the consumer named "push" (Consumer), one per push service
// and batch of messages, pages through spaces with more devices than a
// round may read in push.page jobs (PageWorker), and sends each message
// encrypted (RFC 8291 aes128gcm) and signed (RFC 8292 VAPID) to the
// device's push service (DeliverWorker), each request under a decision on
// the push.deliver right of its principal at most push.rights_max_age old.
//
// The message says only where to look (space, seq, event id, type); the
// client fetches the change itself with its own rights, so no content
// leaves through a push service.
package push
