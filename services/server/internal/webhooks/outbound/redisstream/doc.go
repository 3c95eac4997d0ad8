// Package redisstream is the Redis Streams destination: a subscription's
// messages added (XADD) to a stream whose key is made from a template,
// optionally trimmed to about maxlen entries (MAXLEN ~).
//
// An entry's fields are id (the message's id, the webhook-id), seq (its
// first event's seq), body (the signed JSON) and the Standard Webhooks
// headers under their names (webhook-id, webhook-timestamp,
// webhook-signature, Content-Type and the subscription's own), so a
// consumer verifies an entry as a webhook.
//
// Entry ids are the message's last seq: "<LastSeq>-0". Redis adds an
// entry only above the stream's last id, so a repeat (a retry after an
// answer that was lost) is refused instead of stored twice; Send then
// reads the entry back and answers Delivered when the stream holds the
// message itself or a batch with its seqs. This asks three things of a
// stream key:
//
//   - It takes one subscription's messages, and no other writer's. Seqs
//     are the event log's, so two subscriptions on one key, or entries
//     with time-based ids ("*"), make later messages fall below the
//     stream's last id.
//   - The subscription is ordered. An unordered one's messages complete
//     out of seq order, and a message overtaken by a later one can no
//     longer be added.
//   - A repeat after a gap is told apart by what the stream holds, not by
//     its id alone: a message whose entry id is below the stream's last
//     but which the stream does not hold (it was never added, or it was
//     trimmed by maxlen or deleted) cannot be added any more; Send answers
//     Retry naming the stream, and the subscription's retry policy ends
//     it (dead letter) rather than it counting as delivered.
//
// A batch whose answer was lost is retried from its first event alone;
// that event is found in the stream (inside the batch) and counts as
// delivered, and the next batch, which starts after it, may repeat the
// lost batch's other events in a new entry. Consumers deduplicate those
// by the envelopes' event ids.
//
// A message without seqs (a test send) goes in under the stream's last
// seq with the next free sequence part ("<last>-*"), so it never moves the
// stream past a seq still to come.
//
// A resend (the owner asked for a delivery to be sent again) is a new
// entry with a resent field, the time of the resend: it cannot take its
// seq's id again, so it goes in like a test send, after the stream's last
// entry (at its own seq if the stream has not reached it). Its own
// repeats are dropped while its entry (same id and resent fields) is
// among the stream's last 256 entries at or past its seq, which holds for
// an ordered subscription's retry; further back a repeat of a resend is
// added again, and consumers deduplicate it by webhook-id.
//
// Delivered means Redis answered XADD with the entry id: the entry is in
// the server's memory, and on disk as its persistence settings say
// (appendonly, appendfsync). A refusal (a key holding another type, no
// permission, out of memory), an outage or no answer within the attempt's
// time are Retry, with the reason.
package redisstream
