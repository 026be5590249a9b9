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
// data plane installs it before the old one goes; OnDelete reports the old
// one once the Delete exchange is done. Simultaneous rekeys from both sides
// (section 2.8.1) are not resolved yet; neither is rekeying the IKE SA,
// which is refused with NO_PROPOSAL_CHOSEN.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// Rekey replaces child with a new Child SA negotiated on its IKE SA, with
// a fresh Diffie-Hellman exchange when the peer's ESP proposals carry a
// group (PFS), then deletes child. It returns the new Child SA once the
// old one is deleted on both sides, or an error (the old one then stays).
func (e *Endpoint) Rekey(ctx context.Context, child *ChildSA) (*ChildSA, error) {
	w := make(chan result, 1)
	e.mu.Lock()
	spi := child.IKESPIr
	if child.Initiator {
		spi = child.IKESPIi
	}
	sa := e.sas[spi]
	var old *ChildSA
	if sa != nil {
		for _, c := range sa.children {
			if c.InSPI == child.InSPI {
				old = c
			}
		}
	}
	switch {
	case sa == nil || sa.state != stateEstablished || old == nil:
		e.mu.Unlock()
		return nil, errors.New("ike: no such Child SA")
	case sa.pending != nil || sa.waiter != nil:
		e.mu.Unlock()
		return nil, errors.New("ike: the IKE SA has a request outstanding")
	case len(sa.children) >= maxChildren:
		e.mu.Unlock()
		return nil, errors.New("ike: too many Child SAs on the IKE SA")
	}
	r := &rekeyState{old: old, spi: e.newChildSPILocked(), ni: randomNonce(), tsi: old.LocalTS, tsr: old.RemoteTS}
	if g := firstDH(sa.peer.ESP); g != 0 {
		dh, err := NewDH(g)
		if err != nil {
			e.mu.Unlock()
			return nil, err
		}
		r.dh = dh
	}
	sa.waiter = w
	err := sa.sendRekeyLocked(r)
	if err != nil {
		sa.waiter = nil
	}
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case res := <-w:
		return res.child, res.err
	case <-ctx.Done():
		e.mu.Lock()
		if sa.waiter == w {
			sa.waiter = nil
		}
		e.mu.Unlock()
		return nil, fmt.Errorf("ike: rekeying: %w", ctx.Err())
	}
}

func (sa *ikeSA) sendRekeyLocked(r *rekeyState) error {
	esp := make([]Proposal, len(sa.peer.ESP))
	for i, p := range sa.peer.ESP {
		p.SPI = binary.BigEndian.AppendUint32(nil, r.spi)
		esp[i] = p
	}
	inner := []Payload{
		&Notify{Protocol: ProtoESP, SPI: binary.BigEndian.AppendUint32(nil, r.old.InSPI), NType: RekeySA},
		&SA{Proposals: esp}, &Nonce{Data: r.ni},
	}
	if r.dh != nil {
		inner = append(inner, &KE{Group: r.dh.Group(), Data: r.dh.Public()})
	}
	inner = append(inner, &TS{Selectors: r.tsi}, &TS{Responder: true, Selectors: r.tsr})
	if err := sa.requestOutLocked(CREATE_CHILD_SA, inner); err != nil {
		return err
	}
	sa.pending.kind, sa.pending.rekey = reqRekey, r
	return nil
}

// failRequestLocked ends a request of ours that is not the IKE SA's
// first: the waiter learns err, the SA stays.
func (sa *ikeSA) failRequestLocked(err error) []func() {
	sa.ep.cfg.Log.Info("ike: request failed", "peer", sa.peer.Name, "err", err)
	if w := sa.waiter; w != nil {
		sa.waiter = nil
		return []func(){func() { w <- result{err: err} }}
	}
	return nil
}

// rekeyResponseLocked handles the answer to our CREATE_CHILD_SA.
func (sa *ikeSA) rekeyResponseLocked(r *rekeyState, inner []Payload) []func() {
	e := sa.ep
	if n := findNotify(inner, InvalidKEPayload); n != nil && len(n.Data) == 2 && r.retries < 2 {
		e.stats.InvalidKE++
		g := binary.BigEndian.Uint16(n.Data)
		offered := false
		for _, p := range sa.peer.ESP {
			for _, t := range p.Transforms {
				offered = offered || (t.Type == TransformDH && t.ID == g)
			}
		}
		if !offered || (r.dh != nil && r.dh.Group() == g) {
			return sa.failRequestLocked(fmt.Errorf("ike: peer wants DH group %d for the Child SA, which we did not offer", g))
		}
		dh, err := NewDH(g)
		if err != nil {
			return sa.failRequestLocked(err)
		}
		r.retries++
		r.dh = dh
		if err := sa.sendRekeyLocked(r); err != nil {
			return sa.failRequestLocked(err)
		}
		return nil
	}
	if n := firstError(inner); n != nil {
		switch n.NType {
		case NoProposalChosen:
			e.stats.NoProposalChosen++
		case TSUnacceptable:
			e.stats.TSUnacceptable++
		}
		return sa.failRequestLocked(fmt.Errorf("ike: peer answered CREATE_CHILD_SA with %s", notifyName(n.NType)))
	}
	sap, ok1 := find[*SA](inner, nil)
	nr, ok2 := find[*Nonce](inner, nil)
	tsi, ok3 := find[*TS](inner, isInitiatorTS)
	tsr, ok4 := find[*TS](inner, isResponderTS)
	if !ok1 || !ok2 || !ok3 || !ok4 || len(sap.Proposals) != 1 || len(sap.Proposals[0].SPI) != 4 {
		return sa.failRequestLocked(errors.New("ike: CREATE_CHILD_SA response lacks SA, Nonce or TS"))
	}
	esp, err := checkChosen(sa.peer.ESP, sap.Proposals[0], false)
	if err != nil {
		return sa.failRequestLocked(err)
	}
	var gir []byte
	if esp.DH != 0 {
		ke, ok := find[*KE](inner, nil)
		if !ok || r.dh == nil || ke.Group != esp.DH || r.dh.Group() != esp.DH {
			return sa.failRequestLocked(errors.New("ike: CREATE_CHILD_SA response without the KE of the chosen group"))
		}
		if gir, err = r.dh.Shared(ke.Data); err != nil {
			return sa.failRequestLocked(err)
		}
	}
	if !within(tsi.Selectors, r.tsi) || !within(tsr.Selectors, r.tsr) {
		e.stats.TSUnacceptable++
		return sa.failRequestLocked(errors.New("ike: peer's traffic selectors are not within ours"))
	}
	ck, err := DeriveChildKeys(sa.suite.PRF, sa.keys.D, esp, gir, r.ni, nr.Data)
	clear(gir)
	if err != nil {
		return sa.failRequestLocked(err)
	}
	c := &ChildSA{Name: sa.peer.Name, Initiator: sa.initiator, Local: sa.local, Remote: sa.remote,
		InSPI: r.spi, OutSPI: binary.BigEndian.Uint32(sap.Proposals[0].SPI),
		Suite: esp.ESPName(), ESN: esp.ESN,
		InKey: ck.EncR, InAuthKey: ck.IntegR, OutKey: ck.EncI, OutAuthKey: ck.IntegI,
		LocalTS: tsi.Selectors, RemoteTS: tsr.Selectors, Encap: sa.encap,
		IKESPIi: sa.spii, IKESPIr: sa.spir}
	e.stats.ChildSARekeyed++
	after := sa.addChildLocked(c)
	// Now the old one goes (section 2.8).
	if err := sa.requestOutLocked(INFORMATIONAL, []Payload{&Delete{Protocol: ProtoESP, SPIs: []uint32{r.old.InSPI}}}); err != nil {
		return append(after, sa.failRequestLocked(err)...)
	}
	sa.pending.kind, sa.pending.old, sa.pending.next = reqDeleteChild, r.old, c
	return after
}

// createChildRequestLocked answers the peer's CREATE_CHILD_SA: a rekey of
// one of our Child SAs. New Child SAs without REKEY_SA are refused with
// NO_ADDITIONAL_SAS, IKE SA rekeys with NO_PROPOSAL_CHOSEN.
func (sa *ikeSA) createChildRequestLocked(inner []Payload) ([]Payload, []func()) {
	e := sa.ep
	fail := func(n NotifyType, data []byte) ([]Payload, []func()) {
		return []Payload{&Notify{NType: n, Data: data}}, nil
	}
	sap, ok1 := find[*SA](inner, nil)
	ni, ok2 := find[*Nonce](inner, nil)
	if !ok1 || !ok2 {
		return fail(InvalidSyntax, nil)
	}
	for _, p := range sap.Proposals {
		if p.Protocol == ProtoIKE {
			e.stats.NoProposalChosen++
			return fail(NoProposalChosen, nil) // IKE SA rekeying: not yet
		}
	}
	rk := findNotify(inner, RekeySA)
	if rk == nil {
		return fail(NoAdditionalSAs, nil)
	}
	var old *ChildSA
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
	if len(sa.children) >= maxChildren {
		return fail(NoAdditionalSAs, nil)
	}
	tsi, ok1 := find[*TS](inner, isInitiatorTS)
	tsr, ok2 := find[*TS](inner, isResponderTS)
	if !ok1 || !ok2 {
		return fail(InvalidSyntax, nil)
	}
	esp, chosen, ok := selectProposal(sa.peer.ESP, sap.Proposals, false)
	if !ok || len(chosen.SPI) != 4 {
		e.stats.NoProposalChosen++
		return fail(NoProposalChosen, nil)
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
		var err error
		if dh, err = NewDH(esp.DH); err != nil {
			return fail(NoProposalChosen, nil)
		}
		if gir, err = dh.Shared(ke.Data); err != nil {
			return fail(InvalidSyntax, nil)
		}
	}
	// The peer is the requester here, so its TSi is its side.
	nTSi := narrow(tsi.Selectors, selectors(sa.peer.RemoteTS))
	nTSr := narrow(tsr.Selectors, selectors(sa.peer.LocalTS))
	if len(nTSi) == 0 || len(nTSr) == 0 {
		e.stats.TSUnacceptable++
		return fail(TSUnacceptable, nil)
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
	c := &ChildSA{Name: sa.peer.Name, Initiator: sa.initiator, Local: sa.local, Remote: sa.remote,
		InSPI: inSPI, OutSPI: binary.BigEndian.Uint32(chosen.SPI),
		Suite: esp.ESPName(), ESN: esp.ESN,
		InKey: ck.EncI, InAuthKey: ck.IntegI, OutKey: ck.EncR, OutAuthKey: ck.IntegR,
		LocalTS: nTSr, RemoteTS: nTSi, Encap: sa.encap,
		IKESPIi: sa.spii, IKESPIr: sa.spir}
	e.stats.ChildSARekeyed++
	return resp, sa.addChildLocked(c)
}
