// Package brokertest is what the broker destinations' tests share: the
// address of each broker this machine runs (through tooltest.Need: a
// broker that does not answer fails the test under CI and skips it
// elsewhere; .ci/brokers starts them), an in-process TCP proxy to
// put in front of one and cut, names unique to a test, targets with fresh
// signing secrets, messages made from events, and the signature check a
// consumer makes.
package brokertest
