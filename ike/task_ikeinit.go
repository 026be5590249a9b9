package ike

// The IKE SA's own negotiation in IKE_SA_INIT (section 1.2): SA, KE and
// Nonce; the initiator's retries after N(COOKIE) (2.6) and
// N(INVALID_KE_PAYLOAD) (1.2); the responder's choice of peer (by
// address), proposal and group. g^ir and the keys (2.14) are computed off
// the lock. The responder's defences before any IKE SA exists (cookies,
// half-open limits) are initRequestLocked's, in exchange.go.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
)

func init() { registerTask(IKE_SA_INIT, orderIKEInit, newIKEInitTask) }

type ikeInitTask struct {
	chosen Proposal // responder: the proposal chosen, with the initiator's number
	dh     DH       // responder: its key pair
}

func newIKEInitTask(*ikeSA) task { return &ikeInitTask{} }

func (t *ikeInitTask) build(x *exchange) taskStatus {
	sa := x.sa
	if sa.initiator {
		if sa.cookie != nil {
			x.add(&Notify{NType: Cookie, Data: sa.cookie})
		}
		x.add(&SA{Proposals: sa.peer.IKE}, &KE{Group: sa.dh.Group(), Data: sa.dh.Public()}, &Nonce{Data: sa.ni})
		sa.ep.cfg.Log.Debug("ike: initiating", sa.logAttrs("local", sa.local, "proposals", proposalsAttr(sa.peer.IKE), "dh", dhName(sa.dh.Group()))...)
		return taskMore
	}
	x.add(&SA{Proposals: []Proposal{t.chosen}}, &KE{Group: t.dh.Group(), Data: t.dh.Public()}, &Nonce{Data: sa.nr})
	return taskDone
}

func (t *ikeInitTask) process(x *exchange) taskStatus {
	if x.sa.initiator {
		return t.processResponse(x)
	}
	return t.processRequest(x)
}

// processRequest is the responder's: the peer by address, the proposal,
// the group; then its key pair, g^ir and the keys off the lock.
func (t *ikeInitTask) processRequest(x *exchange) taskStatus {
	sa, e := x.sa, x.sa.ep
	ps := x.in
	sap, _ := find[*SA](ps, nil)
	ke, _ := find[*KE](ps, nil)
	ni, _ := find[*Nonce](ps, nil)
	var peer *Peer
	for _, p := range e.cfg.Peers {
		if p.Local == x.local.Addr().Unmap() && (!p.Remote.IsValid() || p.Remote == x.remote.Addr().Unmap()) {
			peer = p
			break
		}
	}
	var suite Suite
	ok := false
	if peer != nil {
		suite, _, ok = selectProposal(peer.IKE, sap.Proposals, false)
	}
	if !ok {
		e.stats.NoProposalChosen++
		if peer == nil {
			e.cfg.Log.Debug("ike: IKE_SA_INIT from an address no connection names", "remote", x.remote, "local", x.local)
		} else {
			// Anyone can send an IKE_SA_INIT: the line is rate-bounded.
			e.propWarn.Log(e.cfg.Log, e.cfg.clock.Now(), slog.LevelWarn, "ike: no IKE proposal chosen",
				"peer", peer.Name, "remote", x.remote, "offered", proposalsAttr(sap.Proposals), "ours", proposalsAttr(peer.IKE))
		}
		return x.fail(NoProposalChosen, errors.New("ike: no IKE proposal chosen"))
	}
	e.cfg.Log.Debug("ike: IKE proposal chosen", "peer", peer.Name, "remote", x.remote, "suite", suite.Name())
	if ke.Group != suite.DH {
		e.stats.InvalidKE++
		return x.failWith(&Notify{NType: InvalidKEPayload, Data: []byte{byte(suite.DH >> 8), byte(suite.DH)}},
			fmt.Errorf("ike: initiator's KE is of group %d, not %d", ke.Group, suite.DH))
	}
	t.chosen = Proposal{Protocol: ProtoIKE, Transforms: suite.transforms()}
	for _, p := range sap.Proposals {
		if _, ok := matchProposal(t.chosen, p, false); ok {
			t.chosen.Num = p.Num
			break
		}
	}
	// The SA is half open from here (it counts against MaxHalfOpen and
	// catches retransmissions); its key pair, g^ir and keys are computed
	// off the lock before the response goes out.
	sa.peer = peer
	sa.ni, sa.nr = bytes.Clone(ni.Data), randomNonce()
	sa.spir = e.newSPILocked()
	e.addResponderLocked(sa, x.setup.pressure)
	spii, spir, nonceI, nonceR, kei := sa.spii, sa.spir, sa.ni, sa.nr, ke.Data
	return x.offLock(func() func() taskStatus {
		dh, keys, prf, err := e.respKeys(suite, kei, nonceI, nonceR, spii, spir)
		return func() taskStatus {
			if err != nil {
				if dh != nil {
					e.stats.RxMalformed++ // the peer's KE data
					return x.fail(InvalidSyntax, err)
				}
				return x.fail(0, err)
			}
			if err := sa.installKeysLocked(suite, prf, keys); err != nil {
				return x.fail(0, err)
			}
			t.dh = dh
			return taskMore
		}
	})
}

// processResponse is the initiator's: a retry after COOKIE or
// INVALID_KE_PAYLOAD, or the responder's choice, then g^ir and the keys
// off the lock.
func (t *ikeInitTask) processResponse(x *exchange) taskStatus {
	sa, e := x.sa, x.sa.ep
	ps := x.in
	if n := findNotify(ps, Cookie); n != nil {
		if sa.retries >= 3 || len(n.Data) < 1 || len(n.Data) > 64 {
			return x.fail(0, errors.New("ike: responder keeps asking for cookies"))
		}
		sa.retries++
		sa.cookie = bytes.Clone(n.Data)
		x.retry = true
		return taskMore
	}
	if n := findNotify(ps, InvalidKEPayload); n != nil {
		e.stats.InvalidKE++
		if sa.retries >= 3 || len(n.Data) != 2 {
			return x.fail(0, errors.New("ike: responder refused our KE payload"))
		}
		g := binary.BigEndian.Uint16(n.Data)
		if !offersGroup(sa.peer.IKE, g) || g == sa.dh.Group() {
			return x.fail(0, fmt.Errorf("ike: responder wants DH group %d, which we did not offer", g))
		}
		dh, err := NewDH(g)
		if err != nil {
			return x.fail(0, err)
		}
		sa.retries++
		sa.dh = dh
		x.retry = true
		return taskMore
	}
	if n := firstError(ps); n != nil {
		if n.NType == NoProposalChosen {
			e.stats.NoProposalChosen++
		}
		return x.fail(0, fmt.Errorf("ike: responder answered IKE_SA_INIT with %s", notifyName(n.NType)))
	}
	e.stats.countExchange(IKE_SA_INIT, true)
	sap, ok1 := find[*SA](ps, nil)
	ke, ok2 := find[*KE](ps, nil)
	nr, ok3 := find[*Nonce](ps, nil)
	if !ok1 || !ok2 || !ok3 || len(sap.Proposals) != 1 || x.hdr.SPIr == 0 {
		return x.fail(0, errors.New("ike: IKE_SA_INIT response lacks SA, KE or Nonce"))
	}
	suite, err := checkChosen(sa.peer.IKE, sap.Proposals[0], false)
	if err != nil {
		return x.fail(0, err)
	}
	e.cfg.Log.Debug("ike: IKE proposal chosen", sa.logAttrs("suite", suite.Name())...)
	if ke.Group != suite.DH || suite.DH != sa.dh.Group() {
		return x.fail(0, fmt.Errorf("ike: responder chose DH group %d with a KE of group %d (ours %d)", suite.DH, ke.Group, sa.dh.Group()))
	}
	dh, ni, spii, spir := sa.dh, sa.ni, sa.spii, x.hdr.SPIr
	nrData, raw := bytes.Clone(nr.Data), x.inRaw
	return x.offLock(func() func() taskStatus {
		keys, prf, err := initKeys(dh, ke.Data, suite, ni, nrData, spii, spir)
		return func() taskStatus {
			if err != nil {
				return x.fail(0, err)
			}
			sa.spir = spir
			sa.nr = nrData
			if err := sa.installKeysLocked(suite, prf, keys); err != nil {
				return x.fail(0, err)
			}
			sa.initResp = raw
			return taskDone
		}
	})
}

// initKeys is the initiator's work on IKE_SA_INIT's response, without the
// lock: g^ir and the IKE SA's keys (section 2.14).
func initKeys(dh DH, peerKE []byte, suite Suite, ni, nr []byte, spii, spir uint64) (*Keys, PRF, error) {
	prf, err := NewPRF(suite.PRF)
	if err != nil {
		return nil, prf, err
	}
	shared, err := dh.Shared(peerKE)
	if err != nil {
		return nil, prf, err
	}
	keys, err := DeriveIKEKeys(suite, ni, nr, shared, spii, spir)
	clear(shared)
	if err != nil {
		return nil, prf, err
	}
	return keys, prf, nil
}

// respKeys is the responder's work for IKE_SA_INIT, without the lock: its
// key pair, g^ir with the initiator's KE data kei, and the IKE SA's keys
// (section 2.14). A nil dh with an error means no key pair could be made;
// a dh with one, that the peer's KE data is bad.
func (e *Endpoint) respKeys(suite Suite, kei, ni, nr []byte, spii, spir uint64) (DH, *Keys, PRF, error) {
	prf, err := NewPRF(suite.PRF)
	if err != nil {
		return nil, nil, prf, err
	}
	dh, err := e.newDH(suite.DH)
	if err != nil {
		return nil, nil, prf, err
	}
	shared, err := dh.Shared(kei)
	if err != nil {
		return dh, nil, prf, err
	}
	keys, err := DeriveIKEKeys(suite, ni, nr, shared, spii, spir)
	clear(shared)
	if err != nil {
		return nil, nil, prf, err
	}
	return dh, keys, prf, nil
}

// installKeysLocked makes keys the IKE SA's, with the SK payload's
// ciphers for each direction.
func (sa *ikeSA) installKeysLocked(suite Suite, prf PRF, keys *Keys) error {
	ei, ai, er, ar := keys.Ei, keys.Ai, keys.Er, keys.Ar
	if !sa.initiator {
		ei, ai, er, ar = er, ar, ei, ai
	}
	out, err := newSKCrypto(suite, ei, ai)
	if err != nil {
		return err
	}
	in, err := newSKCrypto(suite, er, ar)
	if err != nil {
		return err
	}
	sa.suite, sa.prf, sa.keys, sa.out, sa.in = suite, prf, keys, out, in
	sa.dh = nil
	return nil
}

// firstDH is the first Diffie-Hellman group of ps that NewDH computes
// (the group of the KE payload an initiator sends; the responder asks
// with INVALID_KE_PAYLOAD for another it chose), 0 when none is.
func firstDH(ps []Proposal) uint16 {
	for _, p := range ps {
		for _, t := range p.Transforms {
			if t.Type == TransformDH && isDHGroup(t.ID) {
				return t.ID
			}
		}
	}
	return 0
}
