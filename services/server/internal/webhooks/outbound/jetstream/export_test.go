package jetstream

// SkipConfirms makes p publish without waiting for the PubAck: a send is
// Delivered once handed to the client. Only the test that shows the
// conformance suite fails without the PubAck uses it.
func (p *Pool) SkipConfirms() { p.noConfirm = true }
