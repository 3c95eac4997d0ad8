// Package brokertest is what the broker destinations' tests share: the
// address of each broker this machine runs (through tooltest.Need: a
// broker that does not answer fails the test under CI and skips it
// elsewhere; .ci/brokers starts them), in-process TCP proxies to put in
// front of one and cut (Proxy) or slow (SlowProxy), names unique to a
// test, targets with fresh signing secrets, messages made from events, the
// signature check a consumer makes, and Kinds: a row per destination kind
// with a place of a test's own on its broker and the consumer that reads
// it, for the engine's tests over every kind.
package brokertest
