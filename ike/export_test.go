package ike

// SetTap makes e call f with each datagram it receives (with e's lock
// held; f must not keep pkt): the interop tests record strongSwan's
// messages as fuzz seeds with it.
func SetTap(e *Endpoint, f func(pkt []byte)) {
	e.mu.Lock()
	e.tap = f
	e.mu.Unlock()
}
