// Package eventexpr compiles and runs the CEL expressions a webhook
// subscription may carry: a filter, which chooses the events it is sent,
// and a transform, which shapes the body sent for each event.
//
// An expression sees the event as the variables id, seq, type, space,
// actor, occurred_at (a timestamp) and data (the event's JSON object). A
// tenant writes it and every round of the consumer runs it, so it is
// bounded twice: at compile time by its length and nesting depth (and
// refused when even its cheapest run would exceed the cost limit), and at
// run time by the cost limit, which stops an evaluation that does too much
// work (a comprehension over a huge list, a string that keeps doubling).
package eventexpr
