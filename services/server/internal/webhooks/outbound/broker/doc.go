// Package broker holds what the broker destinations (packages jetstream,
// redisstream, mqtt and rabbitmq beside it) share: the configuration
// errors that name a JSON field, the broker URL that carries credentials
// and its masked form, the templates of subjects, keys and topics, the
// dialer every broker connection goes through, which applies the egress
// policy at each dial as the webhook client does, and Pool, the one
// connection per address and credentials that a process's sends share.
package broker
