package ike

// Rekeying a Child SA with CREATE_CHILD_SA (RFC 7296 sections 1.3.3, 2.8
// and 2.17):
//
//	Requester                               Responder
//	HDR, SK{N(REKEY_SA, old SPI), SA, Ni,
//	        [KEi,] TSi, TSr}           -->
//	                                   <--  HDR, SK{SA, Nr, [KEr,] TSi, TSr}
//	  KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr), with the nonces of this
//	  exchange; "initiator" keys are the requester's outbound ones
//	HDR, SK{D(ESP, old SPI)}           -->
//	                                   <--  HDR, SK{D(ESP, its old SPI)}
//
// The new Child SA is reported (OnChildSA) as soon as it exists, so the
// data plane installs it before the old one goes: as responder before our
// answer leaves (the requester may send on it once it has the answer),
// and with ChildSA.HoldOutbound, since the requester can take ESP on it
// only after it read the answer; as requester before our Delete of the
// old one leaves. OnDelete reports the old one once the Delete exchange
// is done. When both sides rekey one Child SA
// at once (section 2.8.1), both exchanges complete; the one that used the
// lowest of the four nonces made the redundant SA, which its initiator
// deletes, and the other initiator deletes the old one. Rekeying the IKE
// SA itself is in ikerekey.go.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Rekey replaces child with a new Child SA negotiated on its IKE SA, with
// a fresh Diffie-Hellman exchange when the peer's ESP proposals carry a
// group (PFS), then deletes child. It returns the new Child SA once the
// old one is deleted on both sides, or an error (the old one then stays,
// unless the peer rekeyed it at the same time and won, section 2.8.1).
// When another request of the IKE SA is outstanding, the rekey waits for
// it.
func (e *Endpoint) Rekey(ctx context.Context, child *ChildSA) (*ChildSA, error) {
	r, err := e.call(ctx, func(w chan result) ([]func(), error) {
		ent := e.children[child.InSPI]
		if ent == nil || ent.c != child || ent.sa.state != stateEstablished {
			return nil, errors.New("ike: no such Child SA")
		}
		return e.rekeyChildLocked(ent, w), nil
	}, nil)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, fmt.Errorf("ike: rekeying: %w", err)
	}
	return r.child, err
}

// confOf returns the configuration of the child that c was made for.
func (sa *ikeSA) confOf(c *ChildSA) childConf {
	if cc, ok := sa.peer.childConf(c.Child); ok {
		return cc
	}
	return sa.peer.childConfs()[0]
}

// sendRekeyLocked sends our CREATE_CHILD_SA for r: a rekey of r.old, or
// an additional Child SA.
func (sa *ikeSA) sendRekeyLocked(r *rekeyState) error {
	kind := reqNewChild
	if r.old != nil {
		kind = reqRekey
	}
	return sa.startLocked(&request{exch: CREATE_CHILD_SA, kind: kind, rekey: r}, &childSAOurs{r: r})
}

// childSAOurs is our CREATE_CHILD_SA for a Child SA: [N(REKEY_SA)], SA,
// Ni, [KEi], TSi, TSr; rekeyResponseLocked takes the answer.
type childSAOurs struct{ r *rekeyState }

func (t *childSAOurs) build(x *exchange) taskStatus {
	sa, r := x.sa, t.r
	esp := make([]Proposal, len(r.conf.esp))
	for i, p := range r.conf.esp {
		p.SPI = binary.BigEndian.AppendUint32(nil, r.spi)
		esp[i] = p
	}
	if r.old != nil {
		x.add(&Notify{Protocol: ProtoESP, SPI: binary.BigEndian.AppendUint32(nil, r.old.InSPI), NType: RekeySA})
	}
	x.add(&SA{Proposals: esp}, &Nonce{Data: r.ni})
	if r.dh != nil {
		x.add(&KE{Group: r.dh.Group(), Data: r.dh.Public()})
	}
	x.add(&TS{Selectors: r.tsi}, &TS{Responder: true, Selectors: r.tsr})
	attrs := sa.logAttrs("child", r.conf.name, "in_spi", ESPSPI(r.spi), "esp_proposals", proposalsAttr(esp),
		"ts_local", selectorList(r.tsi), "ts_remote", selectorList(r.tsr))
	if r.old != nil {
		sa.ep.cfg.Log.Debug("ike: rekeying Child SA", append(attrs, "old_in_spi", ESPSPI(r.old.InSPI))...)
	} else {
		sa.ep.cfg.Log.Debug("ike: creating additional Child SA", attrs...)
	}
	return taskMore
}

func (t *childSAOurs) process(x *exchange) taskStatus {
	return x.withDH(func(pre *dhDone) (taskStatus, *dhNeed) {
		if ke, ok := find[*KE](x.in, nil); ok && pre == nil && t.r.dh != nil && ke.Group == t.r.dh.Group() && firstError(x.in) == nil {
			return 0, &dhNeed{own: t.r.dh, ke: ke.Data} // PFS: g^ir off the lock
		}
		x.later(x.sa.rekeyResponseLocked(t.r, x.in, pre)...)
		return taskDone, nil
	})
}

// failRekeyLocked ends a rekey of ours that failed: its waiter learns
// err, the SAs stay.
func (sa *ikeSA) failRekeyLocked(r *rekeyState, err error) []func() {
	if r.old == nil {
		sa.ep.cfg.Log.Warn("ike: additional Child SA failed", sa.logAttrs("child", r.conf.name, "err", err)...)
		return reply(r.waiter, nil, err)
	}
	sa.ep.cfg.Log.Warn("ike: Child SA rekey failed", sa.logAttrs("err", err)...)
	if ent := sa.ep.children[r.old.InSPI]; ent != nil && ent.c == r.old {
		ent.rekeying, ent.ours = false, nil
	}
	return reply(r.waiter, nil, err)
}

// rekeyResponseLocked handles the answer to our CREATE_CHILD_SA; pre is
// g^ir with our key pair, computed off the lock (childSAOurs), when the
// answer carries a KE for it.
func (sa *ikeSA) rekeyResponseLocked(r *rekeyState, inner []Payload, pre *dhDone) []func() {
	e := sa.ep
	if n := findNotify(inner, InvalidKEPayload); n != nil && len(n.Data) == 2 && r.retries < 2 {
		e.stats.InvalidKE++
		g := binary.BigEndian.Uint16(n.Data)
		if !offersGroup(r.conf.esp, g) || (r.dh != nil && r.dh.Group() == g) {
			return sa.failRekeyLocked(r, fmt.Errorf("ike: peer wants DH group %d for the Child SA, which we did not offer", g))
		}
		dh, err := NewDH(g)
		if err != nil {
			return sa.failRekeyLocked(r, err)
		}
		r.retries++
		r.dh = dh
		if err := sa.sendRekeyLocked(r); err != nil {
			return sa.failRekeyLocked(r, err)
		}
		return nil
	}
	if n := firstError(inner); n != nil {
		switch n.NType {
		case NoProposalChosen:
			e.stats.NoProposalChosen++
		case TSUnacceptable:
			e.stats.TSUnacceptable++
		case TemporaryFailure:
			// Section 2.25: the peer is busy with the same SA (or the
			// IKE SA); unless its own rekey replaced ours, try again
			// a little later.
			e.stats.TempFailures++
			if r.old == nil {
				break
			}
			ent := e.children[r.old.InSPI]
			if ent != nil && ent.peer != nil {
				ent.replaced = true // the peer's rekey made its successor
			}
			if ent != nil && ent.c == r.old && !ent.replaced && r.waiter == nil {
				after := sa.failRekeyLocked(r, errors.New("ike: TEMPORARY_FAILURE"))
				d := e.retryDelay()
				ent.rekeyT = e.cfg.clock.AfterFunc(d, func() { e.childRekeyDue(r.old.InSPI, ent) })
				ent.rekeyAt = e.cfg.clock.Now().Add(d)
				return after
			}
		}
		return sa.failRekeyLocked(r, fmt.Errorf("ike: peer answered CREATE_CHILD_SA with %s", notifyName(n.NType)))
	}
	sap, ok1 := find[*SA](inner, nil)
	nr, ok2 := find[*Nonce](inner, nil)
	tsi, ok3 := find[*TS](inner, isInitiatorTS)
	tsr, ok4 := find[*TS](inner, isResponderTS)
	if !ok1 || !ok2 || !ok3 || !ok4 || len(sap.Proposals) != 1 || len(sap.Proposals[0].SPI) != 4 {
		return sa.failRekeyLocked(r, errors.New("ike: CREATE_CHILD_SA response lacks SA, Nonce or TS"))
	}
	esp, err := checkChosen(r.conf.esp, sap.Proposals[0], false)
	if err != nil {
		return sa.failRekeyLocked(r, err)
	}
	var gir []byte
	if esp.DH != 0 {
		ke, ok := find[*KE](inner, nil)
		if !ok || r.dh == nil || ke.Group != esp.DH || r.dh.Group() != esp.DH {
			return sa.failRekeyLocked(r, errors.New("ike: CREATE_CHILD_SA response without the KE of the chosen group"))
		}
		if pre == nil {
			pre = (&dhNeed{own: r.dh, ke: ke.Data}).compute(e) // not reached: childSAOurs computed it
		}
		if pre.err != nil {
			return sa.failRekeyLocked(r, pre.err)
		}
		gir = pre.gir
	}
	if !within(tsi.Selectors, r.tsi) || !within(tsr.Selectors, r.tsr) {
		e.stats.TSUnacceptable++
		return sa.failRekeyLocked(r, errors.New("ike: peer's traffic selectors are not within ours"))
	}
	ck, err := DeriveChildKeys(sa.suite.PRF, sa.keys.D, esp, gir, r.ni, nr.Data)
	clear(gir)
	if err != nil {
		return sa.failRekeyLocked(r, err)
	}
	c := &ChildSA{Name: sa.peer.Name, Child: r.conf.name, Initiator: sa.initiator, Local: sa.local, Remote: sa.remote,
		InSPI: r.spi, OutSPI: binary.BigEndian.Uint32(sap.Proposals[0].SPI),
		Suite: esp.ESPName(), ESN: esp.ESN,
		InKey: ck.EncR, InAuthKey: ck.IntegR, OutKey: ck.EncI, OutAuthKey: ck.IntegI,
		LocalTS: tsi.Selectors, RemoteTS: tsr.Selectors, Encap: sa.encap,
		IKESPIi: sa.spii, IKESPIr: sa.spir, VIPs: sa.vips}
	if r.old == nil {
		e.stats.ChildSAAdded++
		return append(sa.addChildLocked(c), reply(r.waiter, c, nil)...)
	}
	e.stats.ChildSARekeyed++
	ent := e.children[r.old.InSPI]
	if ent != nil && ent.c != r.old {
		ent = nil
	}
	if ent != nil {
		ent.ours, ent.rekeying = nil, false
	}
	after := sa.addChildLocked(c)
	// Now the old one goes (section 2.8), unless the peer rekeyed it at
	// the same time (section 2.8.1): then the exchange with the lowest
	// nonce made the redundant Child SA, and its initiator deletes that
	// one; the other deletes the old.
	doomed, next := r.old, c
	switch {
	case ent == nil:
		// The old one is gone already (the peer deleted it, or it expired).
		return append(after, reply(r.waiter, c, nil)...)
	case ent.peer != nil:
		e.stats.RekeyCollisions++
		if lowestIsOurs(r.ni, nr.Data, ent.peer.ni, ent.peer.nr) {
			doomed, next = c, ent.peer.child
			e.cfg.Log.Info("ike: simultaneous Child SA rekey: ours lost", "peer", sa.peer.Name)
		}
	}
	ent.replaced = true
	if de := e.children[doomed.InSPI]; de != nil && de.c == doomed {
		de.deleting = true
	}
	// The Delete (and its hold) starts only once OnChildSA has put the
	// new Child SA in the data plane: the peer switches its outbound
	// traffic to it when it reads the Delete.
	w := r.waiter
	return append(after, func() {
		e.mu.Lock()
		var later []func()
		if e.closed {
			later = reply(w, nil, errors.New("ike: endpoint closed"))
		} else {
			later = sa.deleteRekeyedLocked(doomed, next, w)
		}
		e.unlock()
		run(later)
	})
}

// chooseChild picks, for a Child SA the peer requests with proposals sap
// and selectors tsi (its side) and tsr (ours), the first of confs whose
// ESP proposals fit (propFit: any did) and whose selectors intersect the
// requested ones (found), with the chosen suite and proposal and the
// selectors narrowed to confs' (section 2.9). ignoreDH is for IKE_AUTH's
// Child SA, which takes its keys without a DH of its own.
func chooseChild(confs []childConf, sap *SA, tsi, tsr *TS, ignoreDH bool) (conf childConf, esp Suite, chosen *Proposal, nTSi, nTSr []Selector, propFit, found bool) {
	for _, cc := range confs {
		s, ch, ok := selectProposal(cc.esp, sap.Proposals, ignoreDH)
		if !ok || len(ch.SPI) != 4 {
			continue
		}
		propFit = true
		ti, tr := narrow(tsi.Selectors, selectors(cc.remoteTS)), narrow(tsr.Selectors, selectors(cc.localTS))
		if len(ti) == 0 || len(tr) == 0 {
			continue
		}
		return cc, s, ch, ti, tr, true, true
	}
	return childConf{}, Suite{}, nil, nil, nil, propFit, false
}

// deleteRekeyedLocked deletes doomed, the Child SA that a rekey of ours
// made redundant (the old one, or ours after a lost collision), and then
// tells w next, its successor; rekeyResponseLocked calls it once
// OnChildSA reported next. The Delete waits Config.RekeyDeleteDelay
// first, so that ESP sealed under doomed before the data plane's switch
// reaches the peer before it drops its inbound SA; the hold ends early,
// and w learns, when doomed goes otherwise (the peer deletes it, the IKE
// SA goes).
func (sa *ikeSA) deleteRekeyedLocked(doomed, next *ChildSA, w chan result) []func() {
	e := sa.ep
	ent := e.children[doomed.InSPI]
	if ent == nil || ent.c != doomed {
		return reply(w, next, nil)
	}
	ent.deleting = true
	h := &heldDelete{next: next, waiter: w}
	d := e.cfg.RekeyDeleteDelay
	if d <= 0 {
		return e.sendHeldDeleteLocked(ent, h)
	}
	ent.held = h
	ent.holdT = e.cfg.clock.AfterFunc(d, func() { e.heldDeleteDue(ent) })
	sa.changedLocked()
	return nil
}

// heldDeleteDue sends the Delete that deleteRekeyedLocked held, unless
// the Child SA went meanwhile (forgetChildLocked answered its waiter).
func (e *Endpoint) heldDeleteDue(ent *childEntry) {
	e.mu.Lock()
	var after []func()
	if h := ent.held; h != nil && !e.closed && e.children[ent.c.InSPI] == ent {
		ent.held, ent.holdT = nil, nil
		after = e.sendHeldDeleteLocked(ent, h)
	}
	e.unlock()
	run(after)
}

// sendHeldDeleteLocked queues the INFORMATIONAL that deletes ent's Child
// SA on the IKE SA that carries it now.
func (e *Endpoint) sendHeldDeleteLocked(ent *childEntry, h *heldDelete) []func() {
	doomed := ent.c
	return ent.sa.enqueueLocked(op{
		run: func(sa *ikeSA) []func() {
			if e.children[doomed.InSPI] != ent {
				return reply(h.waiter, h.next, nil) // gone meanwhile
			}
			r := &request{exch: INFORMATIONAL, kind: reqDeleteChild, old: doomed, next: h.next, waiter: h.waiter}
			if err := sa.startLocked(r, &deleteChildOurs{old: doomed, next: h.next, waiter: h.waiter}); err != nil {
				return reply(h.waiter, nil, err)
			}
			return nil
		},
		fail: func(err error) []func() { return reply(h.waiter, nil, err) },
	})
}

// retryDelay is how long a rekey refused with TEMPORARY_FAILURE waits
// before it tries again: a few retransmission timeouts, randomised so
// that two peers do not collide again.
func (e *Endpoint) retryDelay() time.Duration {
	base := 2 * e.cfg.RetransmitTimeout
	return base + randDuration(2*base)
}

func init() { registerTask(CREATE_CHILD_SA, orderChildSA, newChildSATask) }

// childSATask answers the peer's CREATE_CHILD_SA for a Child SA: a new
// one or a rekey (createChildRequestLocked).
type childSATask struct{ resp []Payload }

func newChildSATask(*ikeSA) task { return &childSATask{} }

func (t *childSATask) process(x *exchange) taskStatus {
	if sap, ok := find[*SA](x.in, nil); ok && isIKEProposal(sap) {
		return taskDone // ikerekey.go's
	}
	return x.withDH(func(pre *dhDone) (taskStatus, *dhNeed) {
		resp, after, need := x.sa.createChildRequestLocked(x.in, pre)
		if need != nil {
			return 0, need
		}
		t.resp = resp
		x.later(after...)
		return taskMore, nil
	})
}

func (t *childSATask) build(x *exchange) taskStatus {
	x.add(t.resp...)
	return taskDone
}

// isIKEProposal reports whether sap proposes an IKE SA (a rekey of it,
// section 1.3.2) rather than a Child SA.
func isIKEProposal(sap *SA) bool {
	for _, p := range sap.Proposals {
		if p.Protocol == ProtoIKE {
			return true
		}
	}
	return false
}

// createChildRequestLocked answers the peer's CREATE_CHILD_SA for a Child
// SA: a rekey of one of ours (N(REKEY_SA)) or an additional one (section
// 1.3.1; NO_ADDITIONAL_SAS beyond Config.MaxChildSAs). With PFS it
// returns a dhNeed first, and answers when called again with the DH
// computed off the lock (pre).
func (sa *ikeSA) createChildRequestLocked(inner []Payload, pre *dhDone) ([]Payload, []func(), *dhNeed) {
	e := sa.ep
	fail := func(n NotifyType, data []byte) ([]Payload, []func(), *dhNeed) {
		return []Payload{&Notify{NType: n, Data: data}}, nil, nil
	}
	sap, ok1 := find[*SA](inner, nil)
	ni, ok2 := find[*Nonce](inner, nil)
	if !ok1 || !ok2 {
		return fail(InvalidSyntax, nil)
	}
	if sa.rekeyed {
		e.stats.TempFailures++
		return fail(TemporaryFailure, nil) // section 2.25: the IKE SA is going
	}
	ikeRekeying := sa.pending != nil && sa.pending.kind == reqRekeyIKE
	var old *ChildSA
	var ent *childEntry
	if rk := findNotify(inner, RekeySA); rk != nil {
		if len(rk.SPI) == 4 {
			spi := binary.BigEndian.Uint32(rk.SPI)
			for _, c := range sa.children {
				if c.OutSPI == spi {
					old = c
				}
			}
		}
		if old == nil {
			return fail(ChildSANotFound, nil)
		}
		ent = e.children[old.InSPI]
		if ent.deleting || ent.replaced || ikeRekeying {
			// Section 2.25: we are deleting it, replaced it already, or
			// are rekeying the IKE SA.
			e.stats.TempFailures++
			return fail(TemporaryFailure, nil)
		}
		if len(sa.children) >= 2*e.cfg.MaxChildSAs {
			return fail(NoAdditionalSAs, nil)
		}
	} else {
		// An additional Child SA (section 1.3.1).
		if ikeRekeying {
			e.stats.TempFailures++
			return fail(TemporaryFailure, nil)
		}
		if sa.liveChildrenLocked() >= e.cfg.MaxChildSAs {
			e.stats.ChildSALimit++
			return fail(NoAdditionalSAs, nil)
		}
	}
	tsi, ok1 := find[*TS](inner, isInitiatorTS)
	tsr, ok2 := find[*TS](inner, isResponderTS)
	if !ok1 || !ok2 {
		return fail(InvalidSyntax, nil)
	}
	// A rekey keeps its child's configuration; a new Child SA takes the
	// first child whose proposals fit and whose selectors intersect the
	// proposed ones. The peer is the requester here, so its TSi is its
	// side.
	confs := sa.peer.childConfs()
	if old != nil {
		confs = []childConf{sa.confOf(old)}
	}
	conf, esp, chosen, nTSi, nTSr, propFit, found := chooseChild(confs, sap, tsi, tsr, false)
	if !propFit {
		e.stats.NoProposalChosen++
		e.cfg.Log.Warn("ike: no ESP proposal chosen for the peer's CREATE_CHILD_SA",
			sa.logAttrs("offered", proposalsAttr(sap.Proposals), "ours", proposalsAttr(espOf(confs)))...)
		return fail(NoProposalChosen, nil)
	}
	if !found {
		e.stats.TSUnacceptable++
		return fail(TSUnacceptable, nil)
	}
	var ke *KE
	var dh DH
	var gir []byte
	if esp.DH != 0 {
		var ok bool
		ke, ok = find[*KE](inner, nil)
		if !ok || ke.Group != esp.DH {
			e.stats.InvalidKE++
			return fail(InvalidKEPayload, []byte{byte(esp.DH >> 8), byte(esp.DH)})
		}
		switch {
		case pre == nil:
			return nil, nil, &dhNeed{group: esp.DH, ke: ke.Data}
		case pre.dh == nil || pre.dh.Group() != esp.DH:
			return fail(NoProposalChosen, nil)
		case pre.err != nil:
			return fail(InvalidSyntax, nil)
		}
		dh, gir = pre.dh, pre.gir
	}
	nr := randomNonce()
	ck, err := DeriveChildKeys(sa.suite.PRF, sa.keys.D, esp, gir, ni.Data, nr)
	clear(gir)
	if err != nil {
		return fail(NoProposalChosen, nil)
	}
	inSPI := e.newChildSPILocked()
	resp := []Payload{
		&SA{Proposals: []Proposal{{Num: chosen.Num, Protocol: ProtoESP, SPI: binary.BigEndian.AppendUint32(nil, inSPI), Transforms: esp.transforms()}}},
		&Nonce{Data: nr},
	}
	if dh != nil {
		resp = append(resp, &KE{Group: dh.Group(), Data: dh.Public()})
	}
	resp = append(resp, &TS{Selectors: nTSi}, &TS{Responder: true, Selectors: nTSr})
	c := &ChildSA{Name: sa.peer.Name, Child: conf.name, Initiator: sa.initiator, Local: sa.local, Remote: sa.remote,
		InSPI: inSPI, OutSPI: binary.BigEndian.Uint32(chosen.SPI),
		Suite: esp.ESPName(), ESN: esp.ESN,
		InKey: ck.EncI, InAuthKey: ck.IntegI, OutKey: ck.EncR, OutAuthKey: ck.IntegR,
		LocalTS: nTSr, RemoteTS: nTSi, Encap: sa.encap,
		IKESPIi: sa.spii, IKESPIr: sa.spir, VIPs: sa.vips}
	if old == nil {
		e.stats.ChildSAAdded++
		e.cfg.Log.Info("ike: additional Child SA made by the peer", "peer", sa.peer.Name, "child", conf.name)
		return resp, sa.addChildLocked(c), nil
	}
	// The peer installs its inbound SA once it reads our answer, which
	// leaves after OnChildSA (respondLocked): we send on the old Child
	// SA until its Delete (section 2.8).
	c.HoldOutbound = true
	e.stats.ChildSARekeyed++
	if ent.ours != nil {
		// Our rekey of the same SA is outstanding (section 2.8.1): the
		// nonces decide once its answer is in.
		ent.peer = &collision{ni: append([]byte(nil), ni.Data...), nr: nr, child: c}
	} else {
		ent.replaced = true // a queued rekey of ours is moot
	}
	return resp, sa.addChildLocked(c), nil
}

// liveChildrenLocked counts sa's Child SAs that no rekey or delete of
// ours is replacing.
func (sa *ikeSA) liveChildrenLocked() int {
	n := 0
	for _, c := range sa.children {
		if ent := sa.ep.children[c.InSPI]; ent == nil || (!ent.replaced && !ent.deleting) {
			n++
		}
	}
	return n
}

// InitiateChild negotiates an additional Child SA (RFC 7296 section
// 1.3.1) for the child named child of the configured peer named peer
// (one of Peer.Children, or Peer.ChildName for another SA with the
// selectors of IKE_AUTH's), on the established IKE SA with that peer; if
// there is none, it initiates one first (Initiate). A DH group in the
// child's ESP proposals asks for PFS. It returns the new Child SA, also
// reported through OnChildSA, or an error: the peer refused
// (NO_ADDITIONAL_SAS, TS_UNACCEPTABLE, ...), the IKE SA carries
// Config.MaxChildSAs already, or ctx ended. When another request of the
// IKE SA is outstanding, it waits for it.
func (e *Endpoint) InitiateChild(ctx context.Context, peer, child string) (*ChildSA, error) {
	e.mu.Lock()
	p := e.peerLocked(peer)
	e.unlock()
	if p == nil {
		return nil, fmt.Errorf("ike: no peer named %q", peer)
	}
	conf, ok := p.childConf(child)
	if !ok {
		return nil, fmt.Errorf("ike: peer %q has no child named %q", peer, child)
	}
	e.mu.Lock()
	sa := e.establishedLocked(p)
	e.unlock()
	if sa == nil {
		if _, err := e.Initiate(ctx, peer); err != nil {
			return nil, err
		}
	}
	r, err := e.call(ctx, func(w chan result) ([]func(), error) {
		sa := e.establishedLocked(p)
		if sa == nil {
			return nil, fmt.Errorf("ike: no established IKE SA with peer %q", peer)
		}
		return sa.enqueueLocked(op{
			run: func(sa *ikeSA) []func() {
				if sa.liveChildrenLocked() >= e.cfg.MaxChildSAs {
					e.stats.ChildSALimit++
					return reply(w, nil, errors.New("ike: the IKE SA carries MaxChildSAs Child SAs already"))
				}
				r := &rekeyState{conf: conf, spi: e.newChildSPILocked(), ni: randomNonce(),
					tsi: selectors(conf.localTS), tsr: selectors(conf.remoteTS), waiter: w}
				if g := firstDH(conf.esp); g != 0 {
					dh, err := NewDH(g)
					if err != nil {
						return reply(w, nil, err)
					}
					r.dh = dh
				}
				if err := sa.sendRekeyLocked(r); err != nil {
					return reply(w, nil, err)
				}
				return nil
			},
			fail: func(err error) []func() { return reply(w, nil, err) },
		}), nil
	}, nil)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, fmt.Errorf("ike: initiating child %q of %s: %w", child, peer, err)
	}
	return r.child, err
}

// establishedLocked returns the newest established IKE SA with peer p
// that no rekey replaced, or nil.
func (e *Endpoint) establishedLocked(p *Peer) *ikeSA {
	var best *ikeSA
	for _, sa := range e.sas {
		if sa.peer == p && sa.up() &&
			(best == nil || sa.established.After(best.established)) {
			best = sa
		}
	}
	return best
}
