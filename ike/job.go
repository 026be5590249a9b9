package ike

// Slow cryptography off Endpoint.mu. Signing AUTH (a crypto.Signer may
// be an engine's asynchronous queue, cryptodev.NewSigner) and the
// Diffie-Hellman of IKE_SA_INIT run without the lock, on a goroutine of
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
// While an IKE SA is busy, messages for it are dropped and counted
// (Stats.RxBusy): a retransmission brings them again. Jobs in flight are
// bounded by Config.MaxCryptoJobs; a message that would start one more is
// dropped and counted (Stats.CryptoBusy), and its retransmission tries
// again.

// goLocked starts work for sa, which is in state st; the caller holds
// e.mu. work runs without any lock and returns finish, which is called
// with e.mu held if sa is still in st with this job, and returns the
// callbacks to run once the lock is released. goLocked reports false,
// counted, when MaxCryptoJobs are in flight; nothing is started then.
//
// Close does not wait for work in progress (a Signer may block for as
// long as it likes); its result is dropped.
func (e *Endpoint) goLocked(sa *ikeSA, st saState, work func() (finish func() []func())) bool {
	select {
	case e.jobs <- struct{}{}:
	default:
		e.stats.CryptoBusy++
		return false
	}
	e.jobSeq++
	id := e.jobSeq
	sa.job = id
	go func() {
		finish := work()
		<-e.jobs
		e.mu.Lock()
		var after []func()
		if sa.removed || sa.job != id || sa.state != st || e.closed {
			e.stats.CryptoStale++
		} else {
			sa.job = 0
			after = finish()
		}
		e.unlock()
		run(after)
	}()
	return true
}

// newDH makes an ephemeral Diffie-Hellman key: NewDH, unless a test
// replaced it (Config's unexported newDH).
func (e *Endpoint) newDH(group uint16) (DH, error) {
	if f := e.cfg.newDH; f != nil {
		return f(group)
	}
	return NewDH(group)
}
