package ike

// The Child SA that IKE_AUTH makes (section 1.2): SA, TSi and TSr in the
// request and the response, its keys from the IKE SA's (2.17). The
// initiator's failure to get it gives the IKE SA up; the responder's
// leaves the IKE SA up without it (the error Notify in its response).
// Additional Child SAs and rekeys are CREATE_CHILD_SA's (rekey.go).

import (
	"encoding/binary"
	"errors"
	"slices"
)

func init() { registerTask(IKE_AUTH, orderChild, newChildTask) }

type childTask struct {
	// The initiator's offer.
	spi      uint32
	tsi, tsr []Selector
	// The responder's: the request's SA and TS, and our answer.
	sap      *SA
	tsI, tsR *TS
	asked    bool // the request carried them (all three, or some)
	resp     []Payload
}

func newChildTask(*ikeSA) task { return &childTask{} }

func (t *childTask) build(x *exchange) taskStatus {
	sa := x.sa
	if !sa.initiator {
		if !x.setup.peerAuthed {
			return taskMore
		}
		x.add(t.resp...)
		return taskDone
	}
	if x.round > 0 {
		return taskMore // the first request carried the offer
	}
	// SAi2, TSi, TSr.
	t.spi = sa.ep.newChildSPILocked()
	sa.childSPI = t.spi
	esp := make([]Proposal, len(sa.peer.ESP))
	for i, p := range sa.peer.ESP {
		p.SPI = binary.BigEndian.AppendUint32(nil, t.spi)
		// A DH group in an ESP proposal is for PFS in CREATE_CHILD_SA;
		// IKE_AUTH's Child SA takes its keys from the IKE SA (1.2).
		p.Transforms = withoutDH(p.Transforms)
		esp[i] = p
	}
	t.tsi, t.tsr = selectors(x.setup.vip.local(sa.peer.LocalTS)), selectors(sa.peer.RemoteTS)
	sa.tsi, sa.tsr = t.tsi, t.tsr
	x.add(&SA{Proposals: esp}, &TS{Selectors: t.tsi}, &TS{Responder: true, Selectors: t.tsr})
	method := "none"
	if a, ok := find[*Auth](x.out, nil); ok {
		method = authName(a.Method)
	}
	sa.ep.cfg.Log.Debug("ike: authenticating", sa.logAttrs("local_id", sa.peer.LocalID, "remote_id", sa.peer.RemoteID,
		"auth", method, "child", sa.peer.ChildName, "esp_proposals", proposalsAttr(esp),
		"ts_local", selectorList(t.tsi), "ts_remote", selectorList(t.tsr), "child_spi", ESPSPI(t.spi))...)
	return taskMore
}

func (t *childTask) process(x *exchange) taskStatus {
	if x.sa.initiator {
		return t.processResponse(x)
	}
	return t.processRequest(x)
}

// processResponse is the initiator's: the responder's choice, checked
// against the offer.
func (t *childTask) processResponse(x *exchange) taskStatus {
	sa, e := x.sa, x.sa.ep
	if !x.setup.peerAuthed {
		return taskMore // not this round's
	}
	inner := x.in
	fail := func(err error) taskStatus {
		sa.deleteBestEffortLocked()
		return x.fail(0, err)
	}
	sap, ok1 := find[*SA](inner, nil)
	tsi, ok2 := find[*TS](inner, isInitiatorTS)
	tsr, ok3 := find[*TS](inner, isResponderTS)
	if !ok1 || !ok2 || !ok3 || len(sap.Proposals) != 1 || len(sap.Proposals[0].SPI) != 4 {
		return fail(errors.New("ike: IKE_AUTH response lacks the Child SA"))
	}
	esp, err := checkChosen(sa.peer.ESP, sap.Proposals[0], true)
	if err != nil {
		return fail(err)
	}
	e.cfg.Log.Debug("ike: ESP proposal chosen", sa.logAttrs("suite", esp.Name(), "ts_local", selectorList(tsi.Selectors), "ts_remote", selectorList(tsr.Selectors))...)
	if !within(tsi.Selectors, t.tsi) || !within(tsr.Selectors, t.tsr) {
		e.stats.TSUnacceptable++
		return fail(errors.New("ike: responder's traffic selectors are not within ours"))
	}
	ck, err := DeriveChildKeys(sa.suite.PRF, sa.keys.D, esp, nil, sa.ni, sa.nr)
	if err != nil {
		return x.fail(0, err)
	}
	x.setup.child = &ChildSA{Name: sa.peer.Name, Child: sa.peer.ChildName, Initiator: true, Local: sa.local, Remote: sa.remote,
		InSPI: t.spi, OutSPI: binary.BigEndian.Uint32(sap.Proposals[0].SPI),
		Suite: esp.ESPName(), ESN: esp.ESN,
		InKey: ck.EncR, InAuthKey: ck.IntegR, OutKey: ck.EncI, OutAuthKey: ck.IntegI,
		LocalTS: tsi.Selectors, RemoteTS: tsr.Selectors, Encap: sa.encap,
		IKESPIi: sa.spii, IKESPIr: sa.spir, VIPs: x.setup.vip.vips}
	return taskDone
}

// processRequest is the responder's: the request's SA and TS (kept from
// the first round), negotiated once the initiator is authenticated.
func (t *childTask) processRequest(x *exchange) taskStatus {
	sa, e := x.sa, x.sa.ep
	if !t.asked {
		t.asked = true
		t.sap, _ = find[*SA](x.in, nil)
		t.tsI, _ = find[*TS](x.in, isInitiatorTS)
		t.tsR, _ = find[*TS](x.in, isResponderTS)
	}
	if !x.setup.peerAuthed {
		return taskMore
	}
	childFail := func(n NotifyType) taskStatus {
		t.resp = []Payload{&Notify{NType: n}}
		return taskMore
	}
	if t.sap == nil || t.tsI == nil || t.tsR == nil {
		return childFail(InvalidSyntax)
	}
	// The first of the connection's children whose proposals fit and
	// whose selectors intersect the proposed ones, as for CREATE_CHILD_SA
	// (rekey.go): the initiator's first child need not be ours. The DH
	// of ESP proposals does not apply here (section 1.2).
	peer := sa.peer
	if n := x.setup.vip.noChild; n != 0 {
		return childFail(n) // no virtual IP (task_config.go)
	}
	confs := x.setup.vip.confs(peer.childConfs())
	conf, esp, chosen, nTSi, nTSr, propOK, found := chooseChild(confs, t.sap, t.tsI, t.tsR, true)
	if !propOK {
		e.stats.NoProposalChosen++
		e.cfg.Log.Warn("ike: no ESP proposal chosen; the IKE SA stays up without a Child SA",
			sa.logAttrs("offered", proposalsAttr(t.sap.Proposals), "ours", proposalsAttr(espOf(confs)))...)
		return childFail(NoProposalChosen)
	}
	if !found {
		e.stats.TSUnacceptable++
		e.cfg.Log.Warn("ike: traffic selectors unacceptable; the IKE SA stays up without a Child SA", sa.logAttrs("ts_i", selectorList(t.tsI.Selectors), "ts_r", selectorList(t.tsR.Selectors))...)
		return childFail(TSUnacceptable)
	}
	e.cfg.Log.Debug("ike: ESP proposal chosen", sa.logAttrs("child", conf.name, "suite", esp.Name(),
		"ts_i_proposed", selectorList(t.tsI.Selectors), "ts_r_proposed", selectorList(t.tsR.Selectors), "ts_i", selectorList(nTSi), "ts_r", selectorList(nTSr))...)
	ck, err := DeriveChildKeys(sa.suite.PRF, sa.keys.D, esp, nil, sa.ni, sa.nr)
	if err != nil {
		return childFail(NoProposalChosen)
	}
	inSPI := e.newChildSPILocked()
	sa.childSPI = inSPI // taken until the Child SA is (newChildSPILocked)
	t.resp = []Payload{
		&SA{Proposals: []Proposal{{Num: chosen.Num, Protocol: ProtoESP, SPI: binary.BigEndian.AppendUint32(nil, inSPI), Transforms: esp.transforms()}}},
		&TS{Selectors: nTSi}, &TS{Responder: true, Selectors: nTSr}}
	x.setup.child = &ChildSA{Name: peer.Name, Child: conf.name, Local: sa.local, Remote: sa.remote,
		InSPI: inSPI, OutSPI: binary.BigEndian.Uint32(chosen.SPI),
		Suite: esp.ESPName(), ESN: esp.ESN,
		InKey: ck.EncI, InAuthKey: ck.IntegI, OutKey: ck.EncR, OutAuthKey: ck.IntegR,
		LocalTS: nTSr, RemoteTS: nTSi, Encap: sa.encap,
		IKESPIi: sa.spii, IKESPIr: sa.spir, VIPs: x.setup.vip.vips}
	return taskMore
}

func withoutDH(ts []Transform) []Transform {
	out := make([]Transform, 0, len(ts))
	for _, t := range ts {
		if t.Type != TransformDH {
			out = append(out, t)
		}
	}
	return out
}

// espOf is the ESP proposals of confs, each once, in order: what a log
// line names as ours.
func espOf(confs []childConf) []Proposal {
	var out []Proposal
	for _, c := range confs {
		for _, p := range c.esp {
			if !slices.ContainsFunc(out, func(q Proposal) bool { return proposalName(q) == proposalName(p) }) {
				out = append(out, p)
			}
		}
	}
	return out
}
