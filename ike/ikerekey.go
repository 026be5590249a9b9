package ike

// Rekeying the IKE SA (RFC 7296 section 2.18):
//
//	Requester (old IKE SA)                  Responder
//	HDR, SK{SA(IKE, new SPIi), Ni, KEi} -->
//	                                    <-- HDR, SK{SA(IKE, new SPIr), Nr, KEr}
//	  SKEYSEED = prf(SK_d (old), g^ir (new) | Ni | Nr), then section 2.14
//	  with the new SPIs; the requester is the new SA's initiator, both
//	  message IDs start at 0, and the Child SAs move to the new SA
//	HDR, SK{D(IKE)} (old IKE SA)        -->
//	                                    <-- HDR, SK{}
//
// When both sides rekey the IKE SA at once (section 2.8.2), both
// exchanges complete and the new SA made by the exchange with the lowest
// of the four nonces is deleted by its initiator; the other initiator
// deletes the old one. While either side rekeys the IKE SA, requests to
// rekey or make Child SAs are refused with TEMPORARY_FAILURE (section
// 2.25), and our own wait in the queue.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// ikeRekeyState is a CREATE_CHILD_SA we initiated to rekey the IKE SA.
type ikeRekeyState struct {
	spi     uint64 // our SPI of the new IKE SA
	ni      []byte
	dh      DH
	retries int // INVALID_KE restarts
	waiter  chan result
}

// RekeyIKE rekeys the IKE SA that carries child (section 2.18): a new
// IKE SA with fresh keys takes over its Child SAs, and the old one is
// deleted. It returns once the new IKE SA is up (the old one's Delete may
// still be under way), or with an error.
func (e *Endpoint) RekeyIKE(ctx context.Context, child *ChildSA) error {
	_, err := e.call(ctx, func(w chan result) ([]func(), error) {
		sa := e.ikeSAOfLocked(child)
		if sa == nil || !sa.up() {
			return nil, errors.New("ike: no such IKE SA")
		}
		return e.rekeyIKELocked(sa, w), nil
	}, nil)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("ike: rekeying the IKE SA: %w", err)
	}
	return err
}

// rekeyIKELocked queues a rekey of sa.
func (e *Endpoint) rekeyIKELocked(sa *ikeSA, w chan result) []func() {
	if sa.rekeying {
		return reply(w, nil, errors.New("ike: the IKE SA is being rekeyed"))
	}
	sa.rekeying = true
	return sa.enqueueLocked(op{
		run: func(cur *ikeSA) []func() {
			if cur != sa || sa.rekeyed {
				sa.rekeying = false
				return reply(w, nil, errors.New("ike: the IKE SA was rekeyed meanwhile"))
			}
			dh, err := e.newDH(sa.suite.DH)
			if err != nil {
				sa.rekeying = false
				return reply(w, nil, err)
			}
			r := &ikeRekeyState{spi: e.newSPILocked(), ni: randomNonce(), dh: dh, waiter: w}
			if err := sa.sendIKERekeyLocked(r); err != nil {
				sa.rekeying = false
				return reply(w, nil, err)
			}
			return nil
		},
		fail: func(err error) []func() {
			sa.rekeying = false
			return reply(w, nil, err)
		},
	})
}

// sendIKERekeyLocked sends our CREATE_CHILD_SA that rekeys sa.
func (sa *ikeSA) sendIKERekeyLocked(r *ikeRekeyState) error {
	return sa.startLocked(&request{exch: CREATE_CHILD_SA, kind: reqRekeyIKE, ikeRekey: r}, &ikeRekeyOurs{r: r})
}

// ikeRekeyOurs is our CREATE_CHILD_SA that rekeys the IKE SA: SA(IKE,
// new SPIi), Ni, KEi; ikeRekeyResponseLocked takes the answer.
type ikeRekeyOurs struct{ r *ikeRekeyState }

func (t *ikeRekeyOurs) build(x *exchange) taskStatus {
	sa, r := x.sa, t.r
	// Without additional key exchanges: a rekey's would need
	// IKE_FOLLOWUP_KE (RFC 9370 section 2.2.4; intermediate.go).
	props := withoutAddKE(sa.peer.IKE)
	for i, p := range props {
		p.SPI = binary.BigEndian.AppendUint64(nil, r.spi)
		props[i] = p
	}
	// KEi of the group in use, which every proposal of ours should
	// carry; INVALID_KE_PAYLOAD names another.
	x.add(&SA{Proposals: props}, &Nonce{Data: r.ni}, &KE{Group: r.dh.Group(), Data: r.dh.Public()})
	return taskMore
}

func (t *ikeRekeyOurs) process(x *exchange) taskStatus {
	// g^ir off the lock (withDH). Meanwhile the IKE SA a colliding
	// rekey of the peer made waits too (ikeSA.heir, dispatchLocked):
	// the peer's Delete of it must not come before its Child SAs move.
	return x.withDH(func(pre *dhDone) (taskStatus, *dhNeed) {
		after, need := x.sa.ikeRekeyResponseLocked(t.r, x.in, pre)
		if need != nil {
			return 0, need
		}
		x.later(after...)
		return taskDone, nil
	})
}

// newRekeyedLocked makes the IKE SA that a rekey of sa creates; initiator
// says we requested it.
func (sa *ikeSA) newRekeyedLocked(initiator bool, suite Suite, spii, spir uint64, ni, nr, gir []byte) (*ikeSA, error) {
	keys, err := deriveRekeyedIKEKeys(sa.prf, sa.keys.D, suite, ni, nr, gir, spii, spir)
	clear(gir)
	if err != nil {
		return nil, err
	}
	prf, err := NewPRF(suite.PRF)
	if err != nil {
		return nil, err
	}
	ns := &ikeSA{ep: sa.ep, peer: sa.peer, initiator: initiator, state: stateEstablished,
		spii: spii, spir: spir, local: sa.local, remote: sa.remote, encap: sa.encap, natHere: sa.natHere, natThere: sa.natThere, frag: sa.frag,
		ni: append([]byte(nil), ni...), nr: append([]byte(nil), nr...), remoteID: sa.remoteID, hashes: sa.hashes}
	if err := ns.installKeysLocked(suite, prf, keys); err != nil {
		return nil, err
	}
	sa.ep.sas[ns.ourSPI()] = ns
	ns.changedLocked()
	sa.ep.stats.IKESARekeyed++
	ns.startTimersLocked()
	return ns, nil
}

// moveChildrenLocked makes to carry from's Child SAs and queued requests.
func (from *ikeSA) moveChildrenLocked(to *ikeSA) {
	for _, c := range from.children {
		if ent := from.ep.children[c.InSPI]; ent != nil {
			ent.sa = to
		}
	}
	to.children = append(to.children, from.children...)
	from.children = nil
	to.queue = append(to.queue, from.queue...)
	from.queue = nil
	to.leases, from.leases = append(to.leases, from.leases...), nil // task_config.go
	to.vips, from.vips = from.vips, nil
	to.mobike = from.mobike
	to.carryReauthLocked(from) // reauth.go
}

// ikeRekeyResponseLocked handles the answer to our IKE SA rekey. It
// returns a dhNeed first when the answer is a good one, and goes on when
// called again with g^ir computed off the lock (pre; ikeRekeyOurs).
func (sa *ikeSA) ikeRekeyResponseLocked(r *ikeRekeyState, inner []Payload, pre *dhDone) ([]func(), *dhNeed) {
	e := sa.ep
	fail := func(err error) ([]func(), *dhNeed) {
		sa.rekeying = false
		e.cfg.Log.Warn("ike: IKE SA rekey failed", sa.logAttrs("err", err)...)
		var after []func()
		if c := sa.peerRekey; c != nil {
			// The peer's rekey, answered meanwhile, stands alone.
			c.ike.waitsFor = nil
			after = append(after, sa.replayLater())
			sa.retireLocked()
			after = append(c.ike.idleLocked(), sa.replayLater())
		}
		return append(after, reply(r.waiter, nil, err)...), nil
	}
	if n := findNotify(inner, InvalidKEPayload); n != nil && len(n.Data) == 2 && r.retries < 2 {
		e.stats.InvalidKE++
		g := binary.BigEndian.Uint16(n.Data)
		if g == r.dh.Group() || !offersGroup(sa.peer.IKE, g) {
			return fail(fmt.Errorf("ike: peer wants DH group %d for the IKE SA, which we did not offer", g))
		}
		dh, err := NewDH(g)
		if err != nil {
			return fail(err)
		}
		r.retries++
		r.dh = dh
		if err := sa.sendIKERekeyLocked(r); err != nil {
			return fail(err)
		}
		return nil, nil
	}
	if n := firstError(inner); n != nil {
		switch n.NType {
		case NoProposalChosen:
			e.stats.NoProposalChosen++
		case TemporaryFailure:
			e.stats.TempFailures++
			if r.waiter == nil && sa.rekeyT != nil {
				// Try again a little later (section 2.25).
				stop(sa.rekeyT)
				d := e.retryDelay()
				sa.rekeyT = e.cfg.clock.AfterFunc(d, func() { e.ikeRekeyDue(sa) })
				sa.rekeyAt = e.cfg.clock.Now().Add(d)
			}
		}
		return fail(fmt.Errorf("ike: peer answered the IKE SA rekey with %s", notifyName(n.NType)))
	}
	sap, ok1 := find[*SA](inner, nil)
	nr, ok2 := find[*Nonce](inner, nil)
	ke, ok3 := find[*KE](inner, nil)
	if !ok1 || !ok2 || !ok3 || len(sap.Proposals) != 1 || sap.Proposals[0].Protocol != ProtoIKE || len(sap.Proposals[0].SPI) != 8 {
		return fail(errors.New("ike: IKE SA rekey response lacks SA, Nonce or KE"))
	}
	suite, err := checkChosen(withoutAddKE(sa.peer.IKE), sap.Proposals[0], false)
	if err != nil {
		return fail(err)
	}
	if suite.DH != r.dh.Group() || ke.Group != suite.DH {
		return fail(fmt.Errorf("ike: peer chose DH group %d with a KE of group %d (ours %d)", suite.DH, ke.Group, r.dh.Group()))
	}
	if pre == nil {
		return nil, &dhNeed{own: r.dh, ke: ke.Data} // g^ir off the lock
	}
	if pre.err != nil {
		return fail(pre.err)
	}
	gir := pre.gir
	spir := binary.BigEndian.Uint64(sap.Proposals[0].SPI)
	if spir == 0 {
		return fail(errors.New("ike: peer's new IKE SPI is zero"))
	}
	ns, err := sa.newRekeyedLocked(true, suite, r.spi, spir, r.ni, nr.Data, gir)
	if err != nil {
		return fail(err)
	}
	sa.rekeying = false
	e.cfg.Log.Info("ike: IKE SA rekeyed", "peer", sa.peer.Name, "old_spi_i", IKESPI(sa.spii), "old_spi_r", IKESPI(sa.spir), "spi_i", IKESPI(ns.spii), "spi_r", IKESPI(ns.spir), "suite", ns.suite.Name())
	after := reply(r.waiter, nil, nil)
	doomed := sa
	if c := sa.peerRekey; c != nil {
		// Section 2.8.2: both of us rekeyed it; we answered the peer's
		// first, which made c.ike and moved the Child SAs there.
		e.stats.RekeyCollisions++
		c.ike.waitsFor = nil
		after = append(after, sa.replayLater())
		if lowestIsOurs(r.ni, nr.Data, c.ni, c.nr) {
			doomed = ns // ours is redundant: we delete it, the peer the old
			e.cfg.Log.Info("ike: simultaneous IKE SA rekey: ours lost", "peer", sa.peer.Name)
		} else {
			c.ike.moveChildrenLocked(ns) // the peer deletes the one it made
		}
	} else {
		sa.moveChildrenLocked(ns)
	}
	sa.rekeyed = true
	sa.changedLocked()
	sa.stopLifeTimersLocked()
	if doomed == ns {
		ns.rekeyed = true
		ns.stopLifeTimersLocked()
	}
	doomed.startLocked(&request{exch: INFORMATIONAL, kind: reqDeleteIKE}, deleteIKEOurs{})
	return append(after, ns.idleLocked()...), nil
}

// replayLater returns a function that, once the lock is free again,
// processes the messages parked in sa's backlog (ikeSA.waitsFor).
func (sa *ikeSA) replayLater() func() {
	e := sa.ep
	return func() {
		e.mu.Lock()
		after := sa.replayBacklogLocked()
		e.unlock()
		run(after)
	}
}

// offersGroup reports whether one of ps carries DH group g.
func offersGroup(ps []Proposal, g uint16) bool {
	for _, p := range ps {
		for _, t := range p.Transforms {
			if t.Type == TransformDH && t.ID == g {
				return true
			}
		}
	}
	return false
}

// retireLocked marks sa as replaced by the peer's rekey: the peer deletes
// it; should its Delete be lost, it goes after HalfOpenTimeout.
func (sa *ikeSA) retireLocked() {
	e := sa.ep
	sa.rekeyed = true
	sa.changedLocked()
	sa.stopLifeTimersLocked()
	stop(sa.halfOpenTimer)
	sa.halfOpenTimer = e.cfg.clock.AfterFunc(e.cfg.HalfOpenTimeout, func() {
		e.mu.Lock()
		var after []func()
		if !sa.removed {
			after = e.removeLocked(sa, errDeleted)
		}
		e.unlock()
		run(after)
	})
}

func init() { registerTask(CREATE_CHILD_SA, orderIKERekey, newIKERekeyTask) }

// ikeRekeyTask answers the peer's CREATE_CHILD_SA that rekeys the IKE SA
// (ikeRekeyRequestLocked).
type ikeRekeyTask struct{ resp []Payload }

func newIKERekeyTask(*ikeSA) task { return &ikeRekeyTask{} }

func (t *ikeRekeyTask) process(x *exchange) taskStatus {
	sap, ok1 := find[*SA](x.in, nil)
	ni, ok2 := find[*Nonce](x.in, nil)
	if !ok1 || !ok2 || !isIKEProposal(sap) {
		return taskDone // rekey.go's
	}
	// The responder's key pair and g^ir are still made under the lock:
	// with them off it (withDH), TestRekeyCollision/ike lost a side's
	// Child SA about once in 180 runs (branch lock-wip).
	resp, after, need := x.sa.ikeRekeyRequestLocked(sap, ni, x.in, nil)
	if need != nil {
		resp, after, _ = x.sa.ikeRekeyRequestLocked(sap, ni, x.in, need.compute(x.sa.ep))
	}
	t.resp = resp
	x.later(after...)
	return taskMore
}

func (t *ikeRekeyTask) build(x *exchange) taskStatus {
	x.add(t.resp...)
	return taskDone
}

// ikeRekeyRequestLocked answers the peer's CREATE_CHILD_SA that rekeys
// the IKE SA (section 2.18). It returns a dhNeed first, and answers when
// called again with the DH computed off the lock (pre).
func (sa *ikeSA) ikeRekeyRequestLocked(sap *SA, ni *Nonce, inner []Payload, pre *dhDone) ([]Payload, []func(), *dhNeed) {
	e := sa.ep
	fail := func(n NotifyType, data []byte) ([]Payload, []func(), *dhNeed) {
		return []Payload{&Notify{NType: n, Data: data}}, nil, nil
	}
	ours := sa.pending != nil && sa.pending.kind == reqRekeyIKE
	if sa.rekeyed || (sa.pending != nil && !ours) {
		// Section 2.25: we are deleting or replacing it, or a Child SA
		// exchange of ours is outstanding.
		e.stats.TempFailures++
		return fail(TemporaryFailure, nil)
	}
	suite, chosen, ok := selectProposal(withoutAddKE(sa.peer.IKE), sap.Proposals, false) // no IKE_FOLLOWUP_KE (intermediate.go)
	if !ok || len(chosen.SPI) != 8 || binary.BigEndian.Uint64(chosen.SPI) == 0 {
		e.stats.NoProposalChosen++
		if !ok {
			e.cfg.Log.Warn("ike: no IKE proposal chosen for the peer's IKE SA rekey",
				sa.logAttrs("offered", proposalsAttr(sap.Proposals), "ours", proposalsAttr(withoutAddKE(sa.peer.IKE)))...)
		}
		return fail(NoProposalChosen, nil)
	}
	ke, ok := find[*KE](inner, nil)
	if !ok || ke.Group != suite.DH {
		e.stats.InvalidKE++
		return fail(InvalidKEPayload, []byte{byte(suite.DH >> 8), byte(suite.DH)})
	}
	switch {
	case pre == nil:
		return nil, nil, &dhNeed{group: suite.DH, ke: ke.Data}
	case pre.dh == nil || pre.dh.Group() != suite.DH:
		return fail(NoProposalChosen, nil)
	case pre.err != nil:
		return fail(InvalidSyntax, nil)
	}
	dh, gir := pre.dh, pre.gir
	nr := randomNonce()
	ns, err := sa.newRekeyedLocked(false, suite, binary.BigEndian.Uint64(chosen.SPI), e.newSPILocked(), ni.Data, nr, gir)
	if err != nil {
		return fail(NoProposalChosen, nil)
	}
	e.cfg.Log.Info("ike: IKE SA rekeyed by the peer", "peer", sa.peer.Name, "old_spi_i", IKESPI(sa.spii), "old_spi_r", IKESPI(sa.spir), "spi_i", IKESPI(ns.spii), "spi_r", IKESPI(ns.spir), "suite", ns.suite.Name())
	sa.moveChildrenLocked(ns)
	if ours {
		// Ours is outstanding: the nonces decide when its answer comes
		// (ikeRekeyResponseLocked); until then the new SA carries the
		// Child SAs.
		sa.peerRekey = &collision{ni: append([]byte(nil), ni.Data...), nr: nr, ike: ns}
		ns.waitsFor = sa
	} else {
		sa.retireLocked()
	}
	chosenOut := Proposal{Num: chosen.Num, Protocol: ProtoIKE, SPI: binary.BigEndian.AppendUint64(nil, ns.spir), Transforms: suite.transforms()}
	return []Payload{&SA{Proposals: []Proposal{chosenOut}}, &Nonce{Data: nr}, &KE{Group: dh.Group(), Data: dh.Public()}}, nil, nil
}
