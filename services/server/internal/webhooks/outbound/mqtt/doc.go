// Package mqtt is the MQTT destination: a subscription's messages
// published at QoS 1 (at least once) on a topic made from a template,
// over MQTT 3.1.1 (github.com/eclipse/paho.mqtt.golang).
//
// MQTT 3.1.1 has no message headers, so the payload is a JSON object (see
// Payload) holding the Standard Webhooks headers and the body as a JSON
// string of the signed bytes:
//
//	{"headers":{"Content-Type":"application/json","webhook-id":"…","webhook-signature":"v1,…","webhook-timestamp":"…"},"body":"{\"id\":…}"}
//
// A consumer decodes it and verifies body with the headers as it would a
// webhook. The body stays a string rather than nested JSON because a
// signature covers exact bytes, which a JSON parser in most languages
// does not keep for a nested value. MQTT 5 user properties would carry
// the headers beside an unwrapped body, but need a v5 client.
//
// Delivered means the broker's PUBACK: the broker took the message for
// its current subscriptions (and for persistent sessions, kept as its
// persistence settings say). In MQTT 3.1.1 a broker acknowledges a
// publish its access rules drop, so a topic the credentials may not write
// to looks delivered; MQTT 5 would answer with a reason code. An outage,
// a lost connection or no PUBACK within the attempt's time are Retry,
// with the reason.
//
// MQTT has no way to drop a repeat: a publish whose PUBACK was lost
// reached the broker, and its retry reaches subscribers a second time
// under the same webhook-id, which consumers deduplicate by. The
// connection (one per broker URL and credentials, Pool) keeps no publish
// across a loss, so a publish never goes out later than the Send that
// made it.
package mqtt
