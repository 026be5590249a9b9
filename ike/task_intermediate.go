package ike

// Additional key exchanges (RFC 9370) in IKE_INTERMEDIATE exchanges (RFC
// 9242), as tasks (the schedule and IntAuth are intermediate.go's):
//
//  1. IKE_SA_INIT (intermediateSupportTask): the initiator offering ADDKE
//     transforms announces N(INTERMEDIATE_EXCHANGE_SUPPORTED), the
//     responder answers it with its own; a suite with additional key
//     exchanges needs both.
//  2. IKE_INTERMEDIATE (addKETask), one round per additional key
//     exchange, message IDs 1, 2, ...: the initiator sends KEi(n) (its
//     ML-KEM key made off the lock), the responder answers KEr(n) (the
//     encapsulation off the lock), both under SK_*(n-1); each side chains
//     both messages into IntAuth with SK_p(n-1), then takes SK_*(n): the
//     initiator at once, the responder once its response has left
//     (exchange.onSent).
//  3. IKE_AUTH: IntAuth_iN | IntAuth_rN | IKE_AUTH's message ID goes into
//     both AUTH payloads (setup.authOctets, task_auth.go).
//
// A KE payload of another method or malformed data is answered with
// INVALID_SYNTAX and ends the IKE SA (the ML-KEM draft's section 2.2); an
// initiator given bad data gives the IKE SA up.

import (
	"errors"
	"fmt"
)

const (
	// orderIntermediateSupport places the announcement after
	// fragmentation's.
	orderIntermediateSupport = orderFrag + 5
	// orderAddKEGuard is first in IKE_AUTH.
	orderAddKEGuard = 1
)

func init() {
	registerTask(IKE_SA_INIT, orderIntermediateSupport, newIntermediateSupportTask)
	registerTask(IKE_INTERMEDIATE, orderIntermediate, newAddKETask)
	registerTask(IKE_AUTH, orderAddKEGuard, newAddKEGuard)
}

// intermediateSupportTask is N(INTERMEDIATE_EXCHANGE_SUPPORTED) in
// IKE_SA_INIT (RFC 9242 section 3.1; RFC 9370 section 2.2.1 asks for it
// with ADDKE transforms).
type intermediateSupportTask struct {
	peer bool // responder: the initiator announced it
}

func newIntermediateSupportTask(sa *ikeSA) task {
	if sa.initiator && !offersAddKE(sa.peer.IKE) {
		return nil // nothing changes for a configuration without ADDKE
	}
	return &intermediateSupportTask{}
}

// offersAddKE reports whether any proposal has an additional key
// exchange other than "none".
func offersAddKE(ps []Proposal) bool {
	for _, p := range ps {
		for _, t := range p.Transforms {
			if isAddKE(t.Type) && t.ID != DHNone {
				return true
			}
		}
	}
	return false
}

func (t *intermediateSupportTask) build(x *exchange) taskStatus {
	if x.sa.initiator || t.peer {
		x.add(&Notify{NType: IntermediateExchangeSupported})
	}
	if x.sa.initiator {
		return taskMore
	}
	return taskDone
}

func (t *intermediateSupportTask) process(x *exchange) taskStatus {
	sa := x.sa
	announced := findNotify(x.in, IntermediateExchangeSupported) != nil
	if len(sa.suite.addKEMethods()) > 0 && !announced {
		if sa.initiator {
			return x.fail(0, errors.New("ike: the responder chose additional key exchanges without N(INTERMEDIATE_EXCHANGE_SUPPORTED)"))
		}
		return x.fail(NoProposalChosen, errors.New("ike: additional key exchanges offered without N(INTERMEDIATE_EXCHANGE_SUPPORTED)"))
	}
	if sa.initiator {
		return taskDone
	}
	t.peer = announced
	return taskMore
}

// addKETask runs the IKE SA's additional key exchanges, one round of
// IKE_INTERMEDIATE each. It is the exchange's last task: its view of our
// message (for IntAuth) is the whole of it.
type addKETask struct {
	a       *addKE
	ke      *KE    // responder: the KE payload to answer with
	install func() // responder: takes the next keys, once its response has left
}

func newAddKETask(sa *ikeSA) task {
	a := newAddKE(sa.suite)
	if a == nil {
		return nil // no IKE_INTERMEDIATE
	}
	return &addKETask{a: a}
}

func (t *addKETask) build(x *exchange) taskStatus {
	if x.sa.initiator {
		return t.buildRequest(x)
	}
	return t.buildResponse(x)
}

func (t *addKETask) process(x *exchange) taskStatus {
	if x.sa.initiator {
		return t.processResponse(x)
	}
	return t.processRequest(x)
}

// buildRequest makes the initiator's key for the next exchange off the
// lock and sends its KE payload.
func (t *addKETask) buildRequest(x *exchange) taskStatus {
	a := t.a
	method := a.methods[a.done]
	return x.offLock(func() func() taskStatus {
		dh, err := NewDH(method)
		return func() taskStatus {
			if err != nil {
				return x.fail(0, err)
			}
			a.dh = dh
			x.add(&KE{Group: dh.Group(), Data: dh.Public()})
			return taskMore
		}
	})
}

// processResponse takes the responder's KE payload: IntAuth over both
// messages with the keys that protected them, the shared secret off the
// lock, then the next keys.
func (t *addKETask) processResponse(x *exchange) taskStatus {
	sa, a := x.sa, t.a
	// IntAuth, with the keys that protected the two messages.
	req, err := intAuthOf(sa.header(IKE_INTERMEDIATE, x.hdr.MessageID, false), x.out)
	if err != nil {
		return x.fail(0, err)
	}
	resp, err := intAuthOf(*x.hdr, x.in)
	if err != nil {
		return x.fail(0, err)
	}
	a.auth.Add(sa.prf, sa.keys.Pi, true, req)
	a.auth.Add(sa.prf, sa.keys.Pr, false, resp)
	suite, keys, ni, nr, spii, spir := sa.suite, sa.keys, sa.ni, sa.nr, sa.spii, sa.spir
	in := x.in
	return x.offLock(func() func() taskStatus {
		shared, err := a.finish(in)
		var next *Keys
		if err == nil {
			next, err = deriveAddKEKeys(suite, keys, shared, ni, nr, spii, spir)
			clear(shared)
		}
		return func() taskStatus {
			if err != nil {
				sa.ep.stats.AddKEFailed++
				return x.fail(0, fmt.Errorf("ike: additional key exchange %d: %w", a.done+1, err))
			}
			if err := sa.installKeysLocked(suite, sa.prf, next); err != nil {
				return x.fail(0, err)
			}
			if a.pending() {
				return taskMore
			}
			// The next request is IKE_AUTH's.
			x.setup.authOctets = a.auth.Value(sa.nextReq)
			return taskDone
		}
	})
}

// processRequest answers the initiator's KE payload: the encapsulation
// (or DH) off the lock, the next keys for what arrives from now on.
func (t *addKETask) processRequest(x *exchange) taskStatus {
	sa, a := x.sa, t.a
	prf, keys := sa.prf, sa.keys
	octets, err := intAuthOf(*x.hdr, x.in)
	if err != nil {
		return x.fail(InvalidSyntax, err)
	}
	a.auth.Add(prf, keys.Pi, true, octets)
	suite, ni, nr, spii, spir := sa.suite, sa.ni, sa.nr, sa.spii, sa.spir
	in := x.in
	return x.offLock(func() func() taskStatus {
		ke, shared, nt, err := a.respond(in)
		var next *Keys
		if err == nil {
			next, err = deriveAddKEKeys(suite, keys, shared, ni, nr, spii, spir)
			clear(shared)
			nt = 0
		}
		return func() taskStatus {
			if err != nil {
				sa.ep.stats.AddKEFailed++
				if nt == InvalidSyntax {
					sa.ep.stats.RxMalformed++
				}
				return x.fail(nt, fmt.Errorf("ike: additional key exchange %d: %w", a.done+1, err))
			}
			install, err := sa.keysLaterLocked(suite, next)
			if err != nil {
				return x.fail(0, err)
			}
			t.ke, t.install = ke, install
			return taskMore
		}
	})
}

// buildResponse sends KEr and chains our response into IntAuth with
// SK_pr(n-1); the response leaves under SK_*(n-1), and the next keys take
// over once it has (the next request comes under them, a retransmission
// of this one is answered from the cache before any decryption).
func (t *addKETask) buildResponse(x *exchange) taskStatus {
	sa, a := x.sa, t.a
	x.add(t.ke)
	octets, err := intAuthOf(sa.header(IKE_INTERMEDIATE, x.hdr.MessageID, true), x.out)
	if err != nil {
		return x.fail(0, err)
	}
	a.auth.Add(sa.prf, sa.keys.Pr, false, octets)
	x.onSent(t.install)
	if a.pending() {
		return taskMore
	}
	// The next request is IKE_AUTH's (RFC 9242 section 3.2).
	x.setup.authOctets = a.auth.Value(x.hdr.MessageID + 1)
	return taskDone
}

// addKEGuard refuses, as responder, an IKE_AUTH that comes before the
// additional key exchanges the IKE SA chose have run (an initiator
// skipping IKE_INTERMEDIATE would authenticate with the keys of the DH
// alone): INVALID_SYNTAX, and the IKE SA ends.
type addKEGuard struct{}

func newAddKEGuard(sa *ikeSA) task {
	if sa.initiator || len(sa.suite.addKEMethods()) == 0 || sa.setup.authOctets != nil {
		return nil
	}
	return addKEGuard{}
}

func (addKEGuard) build(*exchange) taskStatus { return taskDone }

func (addKEGuard) process(x *exchange) taskStatus {
	x.sa.ep.stats.AddKEFailed++
	return x.fail(InvalidSyntax, errors.New("ike: IKE_AUTH before the additional key exchanges"))
}

// keysLaterLocked returns a function that makes keys the IKE SA's, as
// installKeysLocked does; the ciphers are made now, so that it cannot
// fail.
func (sa *ikeSA) keysLaterLocked(suite Suite, keys *Keys) (func(), error) {
	prf, oldKeys, oldOut, oldIn := sa.prf, sa.keys, sa.out, sa.in
	if err := sa.installKeysLocked(suite, prf, keys); err != nil {
		return nil, err
	}
	newOut, newIn := sa.out, sa.in
	sa.keys, sa.out, sa.in = oldKeys, oldOut, oldIn
	return func() { sa.keys, sa.out, sa.in = keys, newOut, newIn }, nil
}
