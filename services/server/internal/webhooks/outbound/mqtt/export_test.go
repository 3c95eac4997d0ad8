package mqtt

// SkipConfirms makes p publish at QoS 0: a send is Delivered once written,
// without the broker's PUBACK. Only the test that shows the conformance
// suite fails without the PUBACK uses it.
func (p *Pool) SkipConfirms() { p.noConfirm = true }
