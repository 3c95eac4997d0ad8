package rabbitmq

// SkipConfirms makes p publish without confirm mode: a send is Delivered
// once written to the socket. Only the test that shows the conformance
// suite fails without publisher confirms uses it.
func (p *Pool) SkipConfirms() { p.noConfirm = true }

// SetIdleChannels changes how many idle channels p's connections keep.
func (p *Pool) SetIdleChannels(n int) { p.channels = n }
