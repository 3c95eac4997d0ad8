// Package broker holds what the broker destinations (packages jetstream,
// redisstream and mqtt beside it) share: the configuration errors that
// name a JSON field, the broker URL that carries credentials and its
// masked form, the templates of subjects, keys and topics, and the dialer
// every broker connection goes through, which applies the egress policy at
// each dial as the webhook client does.
package broker
