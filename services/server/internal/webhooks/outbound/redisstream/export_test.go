package redisstream

// SkipConfirms makes p add entries without waiting for Redis' answer: a
// send is Delivered once the command is on its way. Only the test that
// shows the conformance suite fails without the answer uses it.
func (p *Pool) SkipConfirms() { p.noConfirm = true }
