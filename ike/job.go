package ike

// Slow cryptography off Endpoint.mu. Signing and verifying AUTH (a
// crypto.Signer may be an engine's asynchronous queue,
// cryptodev.NewSigner), the Diffie-Hellman of IKE_SA_INIT and that of a
// Child SA's CREATE_CHILD_SA with PFS (exchange.withDH) run without the
// lock (a task's exchange.offLock, task.go), on a goroutine of
// their own, so that one IKE SA's slow key does not stall the others'
// exchanges. RFC 7296 orders the messages of one IKE SA (window size 1,
// section 2.3) but nothing across IKE SAs.
//
//	1. locked:   the exchange checks the message, snapshots what the work
//	             needs (copies of keys, the messages, the peer's
//	             configuration) and marks the IKE SA busy (ikeSA.job)
//	2. unlocked: the work runs (Shared, DeriveIKEKeys, Sign, verify)
//	3. locked:   finish runs only if the IKE SA is still where step 1
//	             left it (not removed, same job, same state); otherwise
//	             the result is dropped and counted (Stats.CryptoStale)
//
// While an IKE SA is busy, messages for it wait, in order, until the
// work is done (ikeSA.backlog, at most maxBacklog; beyond, they are
// dropped and counted, Stats.RxBusy, and a retransmission brings them
// again): a response that overtook the peer's request must not be read
// before it. Jobs in flight are
// bounded by Config.MaxCryptoJobs: a setup exchange takes a slot for each
// message it processes (exchange.acquireLocked) and holds it until it
// waits for the network again; a message that finds none free is dropped
// and counted (Stats.CryptoBusy), and its retransmission tries again.

// newDH makes an ephemeral Diffie-Hellman key: NewDH, unless a test
// replaced it (Config's unexported newDH).
func (e *Endpoint) newDH(group uint16) (DH, error) {
	if f := e.cfg.newDH; f != nil {
		return f(group)
	}
	return NewDH(group)
}
