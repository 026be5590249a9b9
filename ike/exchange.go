package ike

// The exchanges of one IKE SA: IKE_SA_INIT and IKE_AUTH for both roles,
// and INFORMATIONAL (Delete, liveness). Every function with a Locked
// suffix runs with Endpoint.mu held and returns the callbacks to run after
// it is released.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"
)

type saState uint8

const (
	stateInitSent    saState = iota + 1 // initiator: IKE_SA_INIT request out
	stateAuthSent                       // initiator: IKE_AUTH request out
	stateHalfOpen                       // responder: IKE_SA_INIT answered
	stateEstablished                    // IKE_AUTH done
	stateDeleting                       // our Delete request is out
)

// request is our outstanding request (window size 1, section 2.3).
type request struct {
	id       uint32
	exch     ExchangeType
	pkts     [][]byte // the datagrams: the message, or its fragments
	tries    int
	kind     requestKind
	rekey    *rekeyState    // kind reqRekey
	ikeRekey *ikeRekeyState // kind reqRekeyIKE
	old      *ChildSA       // kind reqDeleteChild: the Child SA being deleted
	next     *ChildSA       // kind reqDeleteChild: the Child SA that replaced it
	waiter   chan result    // kind reqDeleteChild: learns next
}

type requestKind uint8

const (
	reqOther       requestKind = iota
	reqRekey                   // CREATE_CHILD_SA rekeying a Child SA
	reqDeleteChild             // INFORMATIONAL deleting a rekeyed Child SA
	reqRekeyIKE                // CREATE_CHILD_SA rekeying the IKE SA (section 2.18)
	reqDeleteIKE               // INFORMATIONAL deleting an IKE SA replaced by a rekey
	reqNewChild                // CREATE_CHILD_SA making an additional Child SA (section 1.3.1)
)

// rekeyState is a CREATE_CHILD_SA we initiated to rekey old (section
// 2.8), or, with old nil, to make an additional Child SA (section 1.3.1).
type rekeyState struct {
	old      *ChildSA
	conf     childConf // the child it is for: proposals, selectors
	spi      uint32    // our inbound SPI for the new SA
	ni       []byte
	dh       DH // nil without PFS
	tsi, tsr []Selector
	retries  int         // INVALID_KE restarts
	waiter   chan result // Rekey's caller, if any
}

// ikeSA is one IKE SA and its Child SAs. Endpoint.mu guards every
// field.
type ikeSA struct {
	ep        *Endpoint
	peer      *Peer
	initiator bool
	state     saState
	removed   bool
	released  bool   // removed by Release: another member goes on with it, so no OnDelete
	job       uint64 // a computation off the lock is in flight (job.go)
	frag      bool   // both sides announced IKE fragmentation (frag.go)

	fragReq, fragResp *reassembly // the peer's request, the response to ours, arriving in fragments

	spii, spir    uint64
	local, remote netip.AddrPort
	hoKey         halfOpenKey

	suite    Suite
	prf      PRF
	keys     *Keys
	out, in  *skCrypto // what we send, what we receive
	ni, nr   []byte
	dh       DH
	initReq  []byte // the IKE_SA_INIT request as sent (AUTH signs it)
	initResp []byte
	encap    bool
	natHere  bool      // NAT detection found our address translated: send NAT-keepalives (keepalive.go)
	ka       keepAlive // NAT-keepalive state
	cookie   []byte
	retries  int      // cookie and INVALID_KE restarts
	hashes   []uint16 // the peer's N(SIGNATURE_HASH_ALGORITHMS)

	nextReq  uint32   // message ID of our next request
	pending  *request // our outstanding request
	nextPeer uint32   // message ID of the peer's next request
	lastReq  []byte   // the peer's last request (its fragment 1 if fragmented)
	lastResp [][]byte // our response to it: the message or its fragments

	children           []*ChildSA // established, oldest first (bounded: Config.MaxChildSAs, twice during rekeys)
	childSPI           uint32     // initiator: the inbound SPI we proposed in IKE_AUTH
	tsi, tsr           []Selector
	waiter             chan result
	timer              stopper
	timerGen           uint64
	halfOpenTimer      stopper
	respLocal, respRem netip.AddrPort
	respHeld           bool // lastResp waits for its request's callbacks (respondLocked)

	remoteID        Identity  // the peer's authenticated identity
	queue           []op      // requests waiting for the window (maxQueued)
	lastHeard       time.Time // last authenticated message from the peer
	established     time.Time
	rekeyT, expireT stopper // the IKE SA's Lifetime
	// rekeyAt and expireAt are when rekeyT and expireT fire (zero:
	// never), for snapshots.
	rekeyAt, expireAt time.Time
	dpdT              stopper // liveness check (Peer.DPDDelay)
	rekeying          bool    // our IKE SA rekey is queued or outstanding
	rekeyed           bool    // replaced by a new IKE SA; waits for its Delete
	peerRekey         *collision

	snapDirty bool // its replicated state changed since OnSnapshot last saw it (snapshot.go)
	snapShown bool // OnSnapshot has seen it: its end is reported
}

func (sa *ikeSA) ourSPI() uint64 {
	if sa.initiator {
		return sa.spii
	}
	return sa.spir
}

func (sa *ikeSA) header(exch ExchangeType, id uint32, response bool) Header {
	h := Header{SPIi: sa.spii, SPIr: sa.spir, Exchange: exch, MessageID: id, Version: Version}
	if sa.initiator {
		h.Flags |= FlagInitiator
	}
	if response {
		h.Flags |= FlagResponse
	}
	return h
}

func randomNonce() []byte {
	n := make([]byte, 32)
	rand.Read(n)
	return n
}

func findNotify(ps []Payload, t NotifyType) *Notify {
	for _, p := range ps {
		if n, ok := p.(*Notify); ok && n.NType == t {
			return n
		}
	}
	return nil
}

// firstError returns the first error notify of ps.
func firstError(ps []Payload) *Notify {
	for _, p := range ps {
		if n, ok := p.(*Notify); ok && n.NType.IsError() {
			return n
		}
	}
	return nil
}

func find[T Payload](ps []Payload, match func(T) bool) (T, bool) {
	for _, p := range ps {
		if x, ok := p.(T); ok && (match == nil || match(x)) {
			return x, true
		}
	}
	var zero T
	return zero, false
}

func isResponderID(id *ID) bool { return id.Responder }
func isInitiatorID(id *ID) bool { return !id.Responder }
func isResponderTS(ts *TS) bool { return ts.Responder }
func isInitiatorTS(ts *TS) bool { return !ts.Responder }
func notifyName(t NotifyType) string {
	switch t {
	case NoProposalChosen:
		return "NO_PROPOSAL_CHOSEN"
	case AuthenticationFailed:
		return "AUTHENTICATION_FAILED"
	case TSUnacceptable:
		return "TS_UNACCEPTABLE"
	case InvalidKEPayload:
		return "INVALID_KE_PAYLOAD"
	case InvalidSyntax:
		return "INVALID_SYNTAX"
	case InvalidMessageID:
		return "INVALID_MESSAGE_ID"
	case UnsupportedCriticalPayload:
		return "UNSUPPORTED_CRITICAL_PAYLOAD"
	case NoAdditionalSAs:
		return "NO_ADDITIONAL_SAS"
	case TemporaryFailure:
		return "TEMPORARY_FAILURE"
	case ChildSANotFound:
		return "CHILD_SA_NOT_FOUND"
	case InvalidIKESPI:
		return "INVALID_IKE_SPI"
	case InvalidSPI:
		return "INVALID_SPI"
	case InitialContact:
		return "INITIAL_CONTACT"
	case SetWindowSize:
		return "SET_WINDOW_SIZE"
	case AdditionalTSPossible:
		return "ADDITIONAL_TS_POSSIBLE"
	case NATDetectionSourceIP:
		return "NAT_DETECTION_SOURCE_IP"
	case NATDetectionDestinationIP:
		return "NAT_DETECTION_DESTINATION_IP"
	case Cookie:
		return "COOKIE"
	case UseTransportMode:
		return "USE_TRANSPORT_MODE"
	case RekeySA:
		return "REKEY_SA"
	case ESPTFCPaddingNotSupported:
		return "ESP_TFC_PADDING_NOT_SUPPORTED"
	case NonFirstFragmentsAlso:
		return "NON_FIRST_FRAGMENTS_ALSO"
	case MOBIKESupported:
		return "MOBIKE_SUPPORTED"
	case FragmentationSupported:
		return "IKEV2_FRAGMENTATION_SUPPORTED"
	case SignatureHashAlgorithms:
		return "SIGNATURE_HASH_ALGORITHMS"
	}
	// Status types peers send that this package does not act on.
	if n, ok := map[NotifyType]string{16397: "ADDITIONAL_IP4_ADDRESS", 16398: "ADDITIONAL_IP6_ADDRESS",
		16399: "NO_ADDITIONAL_ADDRESSES", 16400: "UPDATE_SA_ADDRESSES", 16404: "MULTIPLE_AUTH_SUPPORTED",
		16406: "REDIRECT_SUPPORTED", 16418: "CHILDLESS_IKEV2_SUPPORTED"}[t]; ok {
		return n
	}
	return fmt.Sprintf("notify %d", uint16(t))
}

// ---------------------------------------------------------------------
// Initiator

func (e *Endpoint) newInitiatorLocked(peer *Peer, dh DH, w chan result) (*ikeSA, error) {
	sa := &ikeSA{ep: e, peer: peer, initiator: true, waiter: w,
		local:  netip.AddrPortFrom(peer.Local, e.cfg.Port),
		remote: netip.AddrPortFrom(peer.Remote, e.cfg.Port),
		ni:     randomNonce(), dh: dh}
	sa.spii = e.newSPILocked()
	e.sas[sa.spii] = sa
	if err := sa.sendInitLocked(); err != nil {
		delete(e.sas, sa.spii)
		return nil, err
	}
	return sa, nil
}

func firstDH(ps []Proposal) uint16 {
	for _, p := range ps {
		for _, t := range p.Transforms {
			if t.Type == TransformDH {
				return t.ID
			}
		}
	}
	return 0
}

// sendInitLocked sends (or sends again, after a cookie or INVALID_KE) the
// IKE_SA_INIT request: [N(COOKIE)], SA, KE, Ni, N(NAT_DETECTION_*).
func (sa *ikeSA) sendInitLocked() error {
	var ps []Payload
	if sa.cookie != nil {
		ps = append(ps, &Notify{NType: Cookie, Data: sa.cookie})
	}
	ps = append(ps, &SA{Proposals: sa.peer.IKE}, &KE{Group: sa.dh.Group(), Data: sa.dh.Public()}, &Nonce{Data: sa.ni})
	ps = append(ps, natNotifies(sa.spii, 0, sa.local, sa.remote, sa.peer.ForceEncap)...)
	ps = append(ps, signatureHashesNotify())
	ps = append(ps, sa.ep.fragmentSupported()...)
	m := &Message{Header: sa.header(IKE_SA_INIT, 0, false), Payloads: ps}
	sa.ep.cfg.Log.Debug("ike: initiating", sa.logAttrs("local", sa.local, "proposals", proposalsAttr(sa.peer.IKE), "dh", dhName(sa.dh.Group()))...)
	sa.debugMessage("sending", &m.Header, ps)
	raw, err := m.Encode()
	if err != nil {
		return err
	}
	sa.state = stateInitSent
	sa.initReq = raw
	sa.nextReq = 1
	sa.pending = &request{id: 0, exch: IKE_SA_INIT, pkts: [][]byte{raw}}
	sa.ep.sendLocked(sa.local, sa.remote, raw)
	sa.armLocked()
	return nil
}

// failLocked ends a negotiation we initiated with err.
func (sa *ikeSA) failLocked(err error) []func() {
	sa.ep.cfg.Log.Warn("ike: negotiation failed", sa.logAttrs("err", err)...)
	return sa.ep.removeLocked(sa, err)
}

func (sa *ikeSA) initResponseLocked(m *Message, raw []byte) []func() {
	e := sa.ep
	ps := m.Payloads
	sa.debugMessage("received", &m.Header, ps)
	if n := findNotify(ps, Cookie); n != nil {
		if sa.retries >= 3 || len(n.Data) < 1 || len(n.Data) > 64 {
			return sa.failLocked(errors.New("ike: responder keeps asking for cookies"))
		}
		sa.retries++
		sa.cookie = append([]byte(nil), n.Data...)
		sa.stopTimerLocked()
		if err := sa.sendInitLocked(); err != nil {
			return sa.failLocked(err)
		}
		return nil
	}
	if n := findNotify(ps, InvalidKEPayload); n != nil {
		e.stats.InvalidKE++
		if sa.retries >= 3 || len(n.Data) != 2 {
			return sa.failLocked(errors.New("ike: responder refused our KE payload"))
		}
		g := binary.BigEndian.Uint16(n.Data)
		offered := false
		for _, p := range sa.peer.IKE {
			for _, t := range p.Transforms {
				offered = offered || (t.Type == TransformDH && t.ID == g)
			}
		}
		if !offered || g == sa.dh.Group() {
			return sa.failLocked(fmt.Errorf("ike: responder wants DH group %d, which we did not offer", g))
		}
		dh, err := NewDH(g)
		if err != nil {
			return sa.failLocked(err)
		}
		sa.retries++
		sa.dh = dh
		sa.stopTimerLocked()
		if err := sa.sendInitLocked(); err != nil {
			return sa.failLocked(err)
		}
		return nil
	}
	if n := firstError(ps); n != nil {
		if n.NType == NoProposalChosen {
			e.stats.NoProposalChosen++
		}
		return sa.failLocked(fmt.Errorf("ike: responder answered IKE_SA_INIT with %s", notifyName(n.NType)))
	}
	e.stats.countExchange(IKE_SA_INIT, true)
	sap, ok1 := find[*SA](ps, nil)
	ke, ok2 := find[*KE](ps, nil)
	nr, ok3 := find[*Nonce](ps, nil)
	if !ok1 || !ok2 || !ok3 || len(sap.Proposals) != 1 || m.Header.SPIr == 0 {
		return sa.failLocked(errors.New("ike: IKE_SA_INIT response lacks SA, KE or Nonce"))
	}
	suite, err := checkChosen(sa.peer.IKE, sap.Proposals[0], false)
	if err != nil {
		return sa.failLocked(err)
	}
	e.cfg.Log.Debug("ike: IKE proposal chosen", sa.logAttrs("suite", suite.Name())...)
	if ke.Group != suite.DH || suite.DH != sa.dh.Group() {
		return sa.failLocked(fmt.Errorf("ike: responder chose DH group %d with a KE of group %d (ours %d)", suite.DH, ke.Group, sa.dh.Group()))
	}
	// g^ir, the keys and our AUTH (a signature perhaps by a slow engine)
	// are computed off the lock (job.go), then IKE_AUTH goes out.
	dh, peer, ni, initReq, spii, spir := sa.dh, sa.peer, sa.ni, sa.initReq, sa.spii, m.Header.SPIr
	nrData, hashes := append([]byte(nil), nr.Data...), peerHashes(ps)
	idi := &ID{IDType: peer.LocalID.Type, Data: peer.LocalID.Data}
	started := e.goLocked(sa, stateInitSent, func() func() []func() {
		keys, prf, auth, err := initKeysAndAuth(dh, ke.Data, suite, ni, nrData, spii, spir, initReq, hashes, peer, idi)
		return func() []func() {
			if err != nil {
				return sa.failLocked(err)
			}
			return sa.authRequestOutLocked(m, raw, suite, prf, keys, nrData, hashes, idi, auth)
		}
	})
	if started {
		sa.stopTimerLocked() // until the job is done: a retransmission would be dropped as busy
	}
	return nil
}

// initKeysAndAuth is the initiator's work between IKE_SA_INIT's response
// and IKE_AUTH's request, without the lock: g^ir, the IKE SA's keys
// (section 2.14) and our AUTH payload.
func initKeysAndAuth(dh DH, peerKE []byte, suite Suite, ni, nr []byte, spii, spir uint64, initReq []byte, hashes []uint16, peer *Peer, idi *ID) (*Keys, PRF, *Auth, error) {
	prf, err := NewPRF(suite.PRF)
	if err != nil {
		return nil, prf, nil, err
	}
	shared, err := dh.Shared(peerKE)
	if err != nil {
		return nil, prf, nil, err
	}
	keys, err := DeriveIKEKeys(suite, ni, nr, shared, spii, spir)
	clear(shared)
	if err != nil {
		return nil, prf, nil, err
	}
	auth, err := makeAuth(prf, hashes, peer, initReq, nr, keys.Pi, idi)
	if err != nil {
		return nil, prf, nil, err
	}
	return keys, prf, auth, nil
}

// authRequestOutLocked installs the keys the initiator computed off the
// lock and sends the IKE_AUTH request.
func (sa *ikeSA) authRequestOutLocked(m *Message, raw []byte, suite Suite, prf PRF, keys *Keys, nr []byte, hashes []uint16, idi *ID, auth *Auth) []func() {
	e := sa.ep
	ps := m.Payloads
	sa.spir = m.Header.SPIr
	sa.nr = nr
	if err := sa.installKeysLocked(suite, prf, keys); err != nil {
		return sa.failLocked(err)
	}
	sa.initResp = raw
	sa.hashes = hashes
	sa.frag = e.cfg.FragmentSize > 0 && findNotify(ps, FragmentationSupported) != nil
	ourNAT, peerNAT := natCheck(ps, sa.spii, sa.spir, sa.local, sa.remote)
	sa.encap = ourNAT || peerNAT || sa.peer.ForceEncap
	sa.natHere = ourNAT
	e.cfg.Log.Debug("ike: NAT detection", sa.logAttrs("local_behind_nat", ourNAT, "remote_behind_nat", peerNAT, "forced", sa.peer.ForceEncap, "encap", sa.encap)...)
	if sa.encap {
		// Section 2.23: once a NAT is detected, the initiator moves to
		// port 4500 for IKE_AUTH and everything after.
		sa.local = netip.AddrPortFrom(sa.local.Addr(), e.cfg.NATTPort)
		sa.remote = netip.AddrPortFrom(sa.remote.Addr(), e.cfg.NATTPort)
	}
	sa.stopTimerLocked()
	sa.pending = nil

	// IKE_AUTH request: SK {IDi, [IDr], AUTH, N(INITIAL_CONTACT), SAi2, TSi, TSr}.
	sa.childSPI = e.newChildSPILocked()
	esp := make([]Proposal, len(sa.peer.ESP))
	for i, p := range sa.peer.ESP {
		p.SPI = binary.BigEndian.AppendUint32(nil, sa.childSPI)
		// A DH group in an ESP proposal is for PFS in CREATE_CHILD_SA;
		// IKE_AUTH's Child SA takes its keys from the IKE SA (1.2).
		p.Transforms = withoutDH(p.Transforms)
		esp[i] = p
	}
	sa.tsi, sa.tsr = selectors(sa.peer.LocalTS), selectors(sa.peer.RemoteTS)
	inner := append([]Payload{idi}, certPayloads(sa.peer)...)
	if len(sa.peer.RemoteCAs) > 0 {
		inner = append(inner, certRequest(sa.peer.RemoteCAs))
	}
	if !sa.peer.RemoteID.IsZero() {
		inner = append(inner, &ID{Responder: true, IDType: sa.peer.RemoteID.Type, Data: sa.peer.RemoteID.Data})
	}
	inner = append(inner, auth, &Notify{NType: InitialContact},
		&SA{Proposals: esp}, &TS{Selectors: sa.tsi}, &TS{Responder: true, Selectors: sa.tsr})
	e.cfg.Log.Debug("ike: authenticating", sa.logAttrs("local_id", Identity{idi.IDType, idi.Data}, "remote_id", sa.peer.RemoteID,
		"auth", authName(auth.Method), "child", sa.peer.ChildName, "esp_proposals", proposalsAttr(esp),
		"ts_local", selectorList(sa.tsi), "ts_remote", selectorList(sa.tsr), "child_spi", ESPSPI(sa.childSPI))...)
	sa.state = stateAuthSent
	if err := sa.requestOutLocked(IKE_AUTH, inner); err != nil {
		return sa.failLocked(err)
	}
	return nil
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

// requestOutLocked sends a new encrypted request and arms its
// retransmission.
func (sa *ikeSA) requestOutLocked(exch ExchangeType, inner []Payload) error {
	return sa.sendRequestLocked(&request{exch: exch}, inner)
}

// sendRequestLocked sends r, a new request of exchange r.exch whose kind
// and state the caller filled in, with inner payloads, and arms its
// retransmission. r is complete before the message leaves, so that the
// IKE SA's snapshot (snapshot.go) carries it.
func (sa *ikeSA) sendRequestLocked(r *request, inner []Payload) error {
	if sa.pending != nil {
		return errors.New("ike: a request is already outstanding")
	}
	pkts, err := sa.sealLocked(sa.header(r.exch, sa.nextReq, false), inner)
	if err != nil {
		return err
	}
	r.id, r.pkts = sa.nextReq, pkts
	sa.pending = r
	sa.nextReq++
	sa.changedLocked()
	sa.ep.sendAllLocked(sa.local, sa.remote, pkts)
	sa.armLocked()
	return nil
}

func (sa *ikeSA) authResponseLocked(inner []Payload) []func() {
	e := sa.ep
	if n := firstError(inner); n != nil {
		switch n.NType {
		case AuthenticationFailed:
			e.stats.AuthFailed++
		case NoProposalChosen:
			e.stats.NoProposalChosen++
		case TSUnacceptable:
			e.stats.TSUnacceptable++
		}
		if n.NType != AuthenticationFailed {
			sa.deleteBestEffortLocked()
		}
		return sa.failLocked(fmt.Errorf("ike: responder answered IKE_AUTH with %s", notifyName(n.NType)))
	}
	idr, ok1 := find[*ID](inner, isResponderID)
	auth, ok2 := find[*Auth](inner, nil)
	if !ok1 || !ok2 {
		return sa.failLocked(errors.New("ike: IKE_AUTH response lacks IDr or AUTH"))
	}
	sa.remoteID = Identity{idr.IDType, append([]byte(nil), idr.Data...)}
	if !sa.peer.RemoteID.IsZero() && !sa.peer.RemoteID.equal(idr) {
		e.stats.AuthFailed++
		sa.deleteBestEffortLocked()
		return sa.failLocked(fmt.Errorf("ike: responder identified as %v, not %v", Identity{idr.IDType, idr.Data}, sa.peer.RemoteID))
	}
	if err := checkAuth(sa.prf, sa.peer, inner, auth, sa.initResp, sa.ni, sa.keys.Pr, idr); err != nil {
		e.stats.AuthFailed++
		sa.deleteBestEffortLocked()
		return sa.failLocked(fmt.Errorf("ike: the responder's AUTH: %w", err))
	}
	e.cfg.Log.Debug("ike: peer authenticated", sa.logAttrs("remote_id", sa.remoteID, "auth", authName(auth.Method))...)
	sap, ok1 := find[*SA](inner, nil)
	tsi, ok2 := find[*TS](inner, isInitiatorTS)
	tsr, ok3 := find[*TS](inner, isResponderTS)
	if !ok1 || !ok2 || !ok3 || len(sap.Proposals) != 1 || len(sap.Proposals[0].SPI) != 4 {
		sa.deleteBestEffortLocked()
		return sa.failLocked(errors.New("ike: IKE_AUTH response lacks the Child SA"))
	}
	esp, err := checkChosen(sa.peer.ESP, sap.Proposals[0], true)
	if err != nil {
		sa.deleteBestEffortLocked()
		return sa.failLocked(err)
	}
	e.cfg.Log.Debug("ike: ESP proposal chosen", sa.logAttrs("suite", esp.Name(), "ts_local", selectorList(tsi.Selectors), "ts_remote", selectorList(tsr.Selectors))...)
	if !within(tsi.Selectors, sa.tsi) || !within(tsr.Selectors, sa.tsr) {
		e.stats.TSUnacceptable++
		sa.deleteBestEffortLocked()
		return sa.failLocked(errors.New("ike: responder's traffic selectors are not within ours"))
	}
	ck, err := DeriveChildKeys(sa.suite.PRF, sa.keys.D, esp, nil, sa.ni, sa.nr)
	if err != nil {
		return sa.failLocked(err)
	}
	c := &ChildSA{Name: sa.peer.Name, Child: sa.peer.ChildName, Initiator: true, Local: sa.local, Remote: sa.remote,
		InSPI: sa.childSPI, OutSPI: binary.BigEndian.Uint32(sap.Proposals[0].SPI),
		Suite: esp.ESPName(), ESN: esp.ESN,
		InKey: ck.EncR, InAuthKey: ck.IntegR, OutKey: ck.EncI, OutAuthKey: ck.IntegI,
		LocalTS: tsi.Selectors, RemoteTS: tsr.Selectors, Encap: sa.encap,
		IKESPIi: sa.spii, IKESPIr: sa.spir}
	return sa.establishLocked(c)
}

// establishLocked records the IKE SA's first Child SA and reports it.
func (sa *ikeSA) establishLocked(c *ChildSA) []func() {
	sa.state = stateEstablished
	sa.ep.stats.IKESAEstablished++
	sa.startTimersLocked()
	after := sa.addChildLocked(c)
	if w := sa.waiter; w != nil {
		sa.waiter = nil
		after = append(after, func() { w <- result{child: c} })
	}
	return after
}

// addChildLocked records an established Child SA and reports it through
// OnChildSA.
func (sa *ikeSA) addChildLocked(c *ChildSA) []func() {
	e := sa.ep
	sa.children = append(sa.children, c)
	sa.changedLocked()
	ent := &childEntry{c: c, sa: sa}
	e.children[c.InSPI] = ent
	e.scheduleChildLocked(ent)
	e.stats.ChildSAEstablished++
	e.cfg.Log.Info("ike: Child SA established", sa.logAttrs("child", c.Child, "in_spi", ESPSPI(c.InSPI), "out_spi", ESPSPI(c.OutSPI),
		"suite", c.Suite, "esn", c.ESN, "encap", c.Encap, "ts_local", selectorList(c.LocalTS), "ts_remote", selectorList(c.RemoteTS))...)
	if f := e.cfg.OnChildSA; f != nil {
		return []func(){func() { f(c) }}
	}
	return nil
}

// dropChildLocked forgets the Child SA c and reports it through OnDelete.
func (sa *ikeSA) dropChildLocked(c *ChildSA) []func() {
	for i, x := range sa.children {
		if x == c {
			sa.children = append(sa.children[:i], sa.children[i+1:]...)
			sa.changedLocked()
			after := sa.ep.forgetChildLocked(c, nil)
			if f := sa.ep.cfg.OnDelete; f != nil {
				after = append(after, func() { f(c) })
			}
			return after
		}
	}
	return nil
}

// deleteBestEffortLocked sends a Delete for the IKE SA once, without
// waiting for the answer (the SA is about to be forgotten).
func (sa *ikeSA) deleteBestEffortLocked() {
	if sa.out == nil || sa.pending != nil {
		return
	}
	pkts, err := sa.sealLocked(sa.header(INFORMATIONAL, sa.nextReq, false), []Payload{&Delete{Protocol: ProtoIKE}})
	if err == nil {
		sa.nextReq++
		sa.changedLocked()
		sa.ep.sendAllLocked(sa.local, sa.remote, pkts)
	}
}

// ---------------------------------------------------------------------
// Responder

// initRequestLocked answers an IKE_SA_INIT request (section 1.2), with a
// cookie challenge first when too many SAs are half open (section 2.6).
func (e *Endpoint) initRequestLocked(local, remote netip.AddrPort, raw []byte, m *Message) []func() {
	h := &m.Header
	key := halfOpenKey{remote, h.SPIi}
	if old := e.halfOpen[key]; old != nil {
		if string(old.initReq) == string(raw) {
			if old.initResp == nil {
				e.stats.RxBusy++ // its keys are being computed
				return nil
			}
			e.stats.RxRetransmits++
			e.sendLocked(local, remote, old.initResp)
			return nil
		}
		e.removeLocked(old, nil)
	}
	ps := m.Payloads
	if e.cfg.Log.Enabled(context.Background(), slog.LevelDebug) {
		e.cfg.Log.Debug("ike: received", "remote", remote, "spi_i", IKESPI(h.SPIi), "exchange", h.Exchange.String(), "msgid", h.MessageID,
			"response", false, "payloads", payloadList(ps))
	}
	sap, ok1 := find[*SA](ps, nil)
	ke, ok2 := find[*KE](ps, nil)
	ni, ok3 := find[*Nonce](ps, nil)
	if !ok1 || !ok2 || !ok3 {
		e.stats.RxMalformed++
		return nil
	}
	reply := func(n *Notify) {
		r := &Message{Header: Header{SPIi: h.SPIi, Exchange: IKE_SA_INIT, Flags: FlagResponse}, Payloads: []Payload{n}}
		if b, err := r.Encode(); err == nil {
			e.sendLocked(local, remote, b)
		}
	}
	held := e.halfOpenBy[halfOpenSource(remote)]
	pressure := e.cfg.CookieThreshold < 0 || len(e.halfOpen) >= e.cfg.CookieThreshold || held >= e.cfg.CookieThresholdIP
	if pressure {
		e.rotateCookieSecretLocked()
		want := e.cookieLocked(ni.Data, remote, h.SPIi)
		c, ok := ps[0].(*Notify)
		if !ok || c.NType != Cookie {
			e.stats.CookiesSent++
			reply(&Notify{NType: Cookie, Data: want})
			return nil
		}
		if !e.cookieValidLocked(c.Data, ni.Data, remote, h.SPIi) {
			e.stats.RxBadCookie++
			reply(&Notify{NType: Cookie, Data: want})
			return nil
		}
	}
	// One address holds at most BlockThreshold half-open SAs, whatever
	// the others hold; beyond CookieThresholdIP of them it had to return
	// a cookie, so that a forged source address cannot take them all.
	if held >= e.cfg.BlockThreshold {
		e.stats.RxBlocked++
		return nil
	}
	if len(e.halfOpen) >= e.cfg.MaxHalfOpen || len(e.sas) >= e.cfg.MaxSAs {
		e.stats.RxHalfOpenLimit++
		return nil
	}
	var peer *Peer
	for _, p := range e.cfg.Peers {
		if p.Local == local.Addr().Unmap() && (!p.Remote.IsValid() || p.Remote == remote.Addr().Unmap()) {
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
			e.cfg.Log.Debug("ike: IKE_SA_INIT from an address no connection names", "remote", remote, "local", local)
		} else {
			e.cfg.Log.Warn("ike: no IKE proposal chosen", "peer", peer.Name, "remote", remote, "offered", proposalsAttr(sap.Proposals), "ours", proposalsAttr(peer.IKE))
		}
		reply(&Notify{NType: NoProposalChosen})
		return nil
	}
	e.cfg.Log.Debug("ike: IKE proposal chosen", "peer", peer.Name, "remote", remote, "suite", suite.Name())
	if ke.Group != suite.DH {
		e.stats.InvalidKE++
		reply(&Notify{NType: InvalidKEPayload, Data: []byte{byte(suite.DH >> 8), byte(suite.DH)}})
		return nil
	}
	var chosenNum uint8
	for _, p := range sap.Proposals {
		if _, ok := matchProposal(Proposal{Protocol: ProtoIKE, Transforms: suite.transforms()}, p, false); ok {
			chosenNum = p.Num
			break
		}
	}
	// The SA is half open from here (it counts against MaxHalfOpen and
	// catches retransmissions); its key pair, g^ir and keys are computed
	// off the lock (job.go) before the response goes out.
	sa := &ikeSA{ep: e, peer: peer, local: local, remote: remote, hoKey: key, state: stateHalfOpen,
		spii: h.SPIi, ni: append([]byte(nil), ni.Data...), nr: randomNonce(), initReq: raw, nextPeer: 1}
	sa.spir = e.newSPILocked()
	spii, spir, nonceI, nonceR, kei := sa.spii, sa.spir, sa.ni, sa.nr, ke.Data
	started := e.goLocked(sa, stateHalfOpen, func() func() []func() {
		dh, keys, prf, err := e.respKeys(suite, kei, nonceI, nonceR, spii, spir)
		return func() []func() {
			if err != nil {
				e.cfg.Log.Debug("ike: IKE_SA_INIT refused", "from", remote, "err", err)
				if dh != nil {
					e.stats.RxMalformed++ // the peer's KE data
					reply(&Notify{NType: InvalidSyntax})
				}
				return e.removeLocked(sa, err)
			}
			return sa.initResponseOutLocked(m, suite, chosenNum, dh, prf, keys)
		}
	})
	if !started {
		return nil // counted; the initiator retransmits
	}
	e.sas[sa.spir] = sa
	e.addHalfOpenLocked(sa)
	sa.halfOpenTimer = e.cfg.clock.AfterFunc(halfOpenLife(e.cfg.HalfOpenTimeout, pressure), func() {
		e.mu.Lock()
		var after []func()
		if !sa.removed && sa.state == stateHalfOpen {
			e.cfg.Log.Debug("ike: half-open SA expired", "from", sa.remote)
			after = e.removeLocked(sa, nil)
		}
		e.unlock()
		run(after)
	})
	return nil
}

// halfOpenLife is how long a new half-open SA may live: HalfOpenTimeout
// d, or under pressure (cookies are due) a fifth of it, at least a
// second, so that places held by initiators that never finish come free
// sooner. A fifth of the default 30s still lets a peer retransmit its
// IKE_AUTH once on strongSwan's 4s schedule.
func halfOpenLife(d time.Duration, pressure bool) time.Duration {
	if !pressure {
		return d
	}
	return max(d/5, min(d, time.Second))
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

// initResponseOutLocked sends the responder's IKE_SA_INIT response once
// its keys are computed.
func (sa *ikeSA) initResponseOutLocked(m *Message, suite Suite, chosenNum uint8, dh DH, prf PRF, keys *Keys) []func() {
	e := sa.ep
	ps := m.Payloads
	peer, local, remote := sa.peer, sa.local, sa.remote
	if err := sa.installKeysLocked(suite, prf, keys); err != nil {
		return e.removeLocked(sa, err)
	}
	ourNAT, peerNAT := natCheck(ps, sa.spii, 0, local, remote)
	sa.encap = ourNAT || peerNAT || peer.ForceEncap
	sa.natHere = ourNAT
	e.cfg.Log.Debug("ike: NAT detection", sa.logAttrs("local_behind_nat", ourNAT, "remote_behind_nat", peerNAT, "forced", peer.ForceEncap, "encap", sa.encap)...)
	resp := []Payload{
		&SA{Proposals: []Proposal{{Num: chosenNum, Protocol: ProtoIKE, Transforms: sa.suite.transforms()}}},
		&KE{Group: dh.Group(), Data: dh.Public()},
		&Nonce{Data: sa.nr},
	}
	resp = append(resp, natNotifies(sa.spii, sa.spir, local, remote, peer.ForceEncap)...)
	resp = append(resp, signatureHashesNotify())
	if len(peer.RemoteCAs) > 0 {
		resp = append(resp, certRequest(peer.RemoteCAs))
	}
	if f := e.fragmentSupported(); f != nil && findNotify(ps, FragmentationSupported) != nil {
		sa.frag = true // RFC 7383 section 2.3: only in answer to the initiator's
		resp = append(resp, f...)
	}
	sa.hashes = peerHashes(ps)
	r := &Message{Header: sa.header(IKE_SA_INIT, 0, true), Payloads: resp}
	sa.debugMessage("sending", &r.Header, resp)
	b, err := r.Encode()
	if err != nil {
		return e.removeLocked(sa, err)
	}
	sa.initResp = b
	e.stats.countExchange(IKE_SA_INIT, false)
	e.sendLocked(local, remote, b)
	return nil
}

// requestLocked handles a request from the peer on an existing SA:
// retransmissions are answered from the cache, anything outside the
// window is dropped, and the rest is decrypted and answered.
func (sa *ikeSA) requestLocked(local, remote netip.AddrPort, raw []byte, m *Message) []func() {
	e := sa.ep
	if sa.job != 0 {
		e.stats.RxBusy++
		return nil
	}
	if sa.in == nil || sa.state == stateInitSent {
		e.stats.RxUnexpected++
		return nil
	}
	id := m.Header.MessageID
	if sa.lastResp != nil && id == sa.nextPeer-1 {
		// A retransmission, whole or its fragment 1 (RFC 7383 section
		// 2.6.1), brings back the whole response; its other
		// fragments are ignored.
		f, isFrag := fragment(m)
		switch {
		case string(raw) == string(sa.lastReq):
			e.stats.RxRetransmits++
			if !sa.respHeld {
				e.sendAllLocked(sa.respLocal, sa.respRem, sa.lastResp)
			}
		case isFrag && f.Number != 1:
			e.stats.RxRetransmits++
		default:
			e.stats.RxOutOfWindow++
		}
		return nil
	}
	if id != sa.nextPeer {
		e.stats.RxOutOfWindow++
		return nil
	}
	inner, raw, done := sa.openLocked(&sa.fragReq, raw, m)
	if !done {
		return nil
	}
	if _, ok := find[*Unknown](inner, func(u *Unknown) bool { return u.Critical }); ok {
		e.stats.RxUnsupportedCrit++
	}
	if m.Header.Exchange == IKE_AUTH && !sa.initiator && sa.state == stateHalfOpen {
		return sa.authRequestLocked(local, remote, raw, id, inner)
	}
	sa.nextPeer++
	sa.lastHeard = e.cfg.clock.Now()
	var resp []Payload
	var after []func()
	remove := false
	switch {
	case m.Header.Exchange == INFORMATIONAL && sa.state >= stateEstablished:
		resp, after, remove = sa.infoRequestLocked(inner)
	case m.Header.Exchange == CREATE_CHILD_SA && sa.state == stateEstablished:
		resp, after = sa.createChildRequestLocked(inner)
	default:
		resp = []Payload{&Notify{NType: InvalidSyntax}}
		remove = sa.state == stateHalfOpen
	}
	return sa.respondLocked(local, remote, raw, m.Header.Exchange, id, resp, after, remove)
}

// respondLocked sends (and caches, for retransmissions) the response
// with inner payloads resp to the request raw with message ID id; remove
// deletes the IKE SA once it is sent. When the request has callbacks
// (after: OnChildSA above all), the response leaves only once they have
// run: the peer may send ESP on a Child SA as soon as it reads the answer
// that makes it (RFC 7296 section 2.8; strongSwan installs its inbound SA
// before it answers, too), so the data plane must have it first. A
// retransmission of the request meanwhile is not answered (respHeld).
func (sa *ikeSA) respondLocked(local, remote netip.AddrPort, raw []byte, exch ExchangeType, id uint32, resp []Payload, after []func(), remove bool) []func() {
	e := sa.ep
	pkts, err := sa.sealLocked(sa.header(exch, id, true), resp)
	if err == nil {
		e.stats.countExchange(exch, false)
		sa.lastReq, sa.lastResp = raw, pkts
		sa.respLocal, sa.respRem = local, remote
		sa.changedLocked()
		if len(after) == 0 {
			e.sendAllLocked(local, remote, pkts)
		} else {
			sa.respHeld = true
			after = append(after, func() {
				e.mu.Lock()
				sa.respHeld = false
				if !e.closed {
					e.sendAllLocked(local, remote, pkts)
				}
				e.unlock()
			})
		}
	}
	if remove {
		e.stats.Deleted++
		after = append(after, e.removeLocked(sa, errDeleted)...)
	}
	return after
}

// authRequestLocked handles the IKE_AUTH request of section 1.2 (message
// ID id, already decrypted to inner): it finds the peer's configuration,
// then verifies the peer's AUTH and makes ours off the lock (job.go), and
// answers once both are done.
func (sa *ikeSA) authRequestLocked(local, remote netip.AddrPort, raw []byte, id uint32, inner []Payload) []func() {
	e := sa.ep
	authFailed := []Payload{&Notify{NType: AuthenticationFailed}}
	refuse := func() []func() {
		e.stats.AuthFailed++
		sa.nextPeer++
		sa.local, sa.remote = local, remote
		return sa.respondLocked(local, remote, raw, IKE_AUTH, id, authFailed, nil, true)
	}
	idi, ok1 := find[*ID](inner, isInitiatorID)
	auth, ok2 := find[*Auth](inner, nil)
	if !ok1 || !ok2 {
		return refuse()
	}
	idr, hasIDr := find[*ID](inner, isResponderID)
	var peer *Peer
	for _, p := range e.cfg.Peers {
		if p.Local != local.Addr().Unmap() || (p.Remote.IsValid() && p.Remote != remote.Addr().Unmap()) {
			continue
		}
		if !p.RemoteID.IsZero() && !p.RemoteID.equal(idi) {
			continue
		}
		if hasIDr && !p.LocalID.equal(idr) {
			continue
		}
		if (len(p.RemoteCAs) > 0) == (auth.Method == AuthPSK) {
			continue
		}
		if _, err := checkChosen(p.IKE, Proposal{Protocol: ProtoIKE, Transforms: sa.suite.transforms()}, false); err != nil {
			continue
		}
		peer = p
		break
	}
	if peer == nil {
		e.cfg.Log.Warn("ike: no connection for the initiator's identity; AUTHENTICATION_FAILED", "remote_id", Identity{idi.IDType, idi.Data}, "remote", remote, "auth", authName(auth.Method))
		return refuse()
	}
	// The job works on copies: removeLocked clears the keys.
	prf, hashes, initReq, initResp, ni, nr := sa.prf, sa.hashes, sa.initReq, sa.initResp, sa.ni, sa.nr
	pi, pr := bytes.Clone(sa.keys.Pi), bytes.Clone(sa.keys.Pr)
	ourID := &ID{Responder: true, IDType: peer.LocalID.Type, Data: peer.LocalID.Data}
	started := e.goLocked(sa, stateHalfOpen, func() func() []func() {
		verr := checkAuth(prf, peer, inner, auth, initReq, nr, pi, idi)
		var ourAuth *Auth
		var serr error
		if verr == nil {
			ourAuth, serr = makeAuth(prf, hashes, peer, initResp, ni, pr, ourID)
		}
		return func() []func() {
			switch {
			case verr != nil:
				e.cfg.Log.Warn("ike: initiator's AUTH does not verify; AUTHENTICATION_FAILED", "peer", peer.Name, "remote_id", Identity{idi.IDType, idi.Data}, "remote", remote, "auth", authName(auth.Method), "err", verr)
				return refuse()
			case serr != nil:
				e.cfg.Log.Error("ike: cannot make our AUTH", "peer", peer.Name, "remote", remote, "err", serr)
				return refuse()
			}
			e.cfg.Log.Debug("ike: peer authenticated", "peer", peer.Name, "remote", remote, "remote_id", Identity{idi.IDType, idi.Data},
				"auth", authName(auth.Method), "local_id", peer.LocalID)
			sa.nextPeer++
			sa.lastHeard = e.cfg.clock.Now()
			// The initiator may have moved to the NAT-T port (section 2.23).
			sa.local, sa.remote = local, remote
			resp, after := sa.authDoneLocked(peer, inner, idi, ourID, ourAuth)
			return sa.respondLocked(local, remote, raw, IKE_AUTH, id, resp, after, false)
		}
	})
	_ = started // not started: counted (CryptoBusy); the initiator retransmits
	return nil
}

// authDoneLocked completes the responder's IKE_AUTH once the initiator's
// AUTH verified and ours is made: the IKE SA is established and the
// Child SA of the request negotiated. It returns the response's inner
// payloads.
func (sa *ikeSA) authDoneLocked(peer *Peer, inner []Payload, idi, ourID *ID, ourAuth *Auth) (resp []Payload, after []func()) {
	e := sa.ep
	sa.peer = peer
	sa.remoteID = Identity{idi.IDType, append([]byte(nil), idi.Data...)}
	var dropped []func()
	if findNotify(inner, InitialContact) != nil {
		// Section 2.4: the peer has no other IKE SA with us (it
		// restarted); whatever we still hold for it is stale.
		for _, o := range e.sas {
			if o != sa && o.peer == peer && o.state >= stateEstablished && o.remoteID.Equal(sa.remoteID) {
				e.stats.InitialContacts++
				e.stats.Deleted++
				e.cfg.Log.Info("ike: INITIAL_CONTACT: dropping the peer's old IKE SA", o.logAttrs()...)
				dropped = append(dropped, e.removeLocked(o, errors.New("ike: the peer restarted (INITIAL_CONTACT)"))...)
			}
		}
	}
	resp = append(append([]Payload{ourID}, certPayloads(peer)...), ourAuth)

	// The IKE SA is up from here; the Child SA may still fail.
	if sa.halfOpenTimer != nil {
		sa.halfOpenTimer.Stop()
	}
	e.dropHalfOpenLocked(sa)
	sa.state = stateEstablished
	childFail := func(n NotifyType) ([]Payload, []func()) {
		e.stats.IKESAEstablished++
		sa.startTimersLocked()
		return append(resp, &Notify{NType: n}), dropped
	}
	sap, ok1 := find[*SA](inner, nil)
	tsi, ok2 := find[*TS](inner, isInitiatorTS)
	tsr, ok3 := find[*TS](inner, isResponderTS)
	if !ok1 || !ok2 || !ok3 {
		return childFail(InvalidSyntax)
	}
	// The first of the connection's children whose proposals fit and
	// whose selectors intersect the proposed ones, as for CREATE_CHILD_SA
	// (rekey.go): the initiator's first child need not be ours. The DH
	// of ESP proposals does not apply here (section 1.2).
	conf, esp, chosen, nTSi, nTSr, propOK, found := chooseChild(peer.childConfs(), sap, tsi, tsr, true)
	if !propOK {
		e.stats.NoProposalChosen++
		e.cfg.Log.Warn("ike: no ESP proposal chosen; the IKE SA stays up without a Child SA", sa.logAttrs("offered", proposalsAttr(sap.Proposals))...)
		return childFail(NoProposalChosen)
	}
	if !found {
		e.stats.TSUnacceptable++
		e.cfg.Log.Warn("ike: traffic selectors unacceptable; the IKE SA stays up without a Child SA", sa.logAttrs("ts_i", selectorList(tsi.Selectors), "ts_r", selectorList(tsr.Selectors))...)
		return childFail(TSUnacceptable)
	}
	e.cfg.Log.Debug("ike: ESP proposal chosen", sa.logAttrs("child", conf.name, "suite", esp.Name(),
		"ts_i_proposed", selectorList(tsi.Selectors), "ts_r_proposed", selectorList(tsr.Selectors), "ts_i", selectorList(nTSi), "ts_r", selectorList(nTSr))...)
	ck, err := DeriveChildKeys(sa.suite.PRF, sa.keys.D, esp, nil, sa.ni, sa.nr)
	if err != nil {
		return childFail(NoProposalChosen)
	}
	inSPI := e.newChildSPILocked()
	resp = append(resp,
		&SA{Proposals: []Proposal{{Num: chosen.Num, Protocol: ProtoESP, SPI: binary.BigEndian.AppendUint32(nil, inSPI), Transforms: esp.transforms()}}},
		&TS{Selectors: nTSi}, &TS{Responder: true, Selectors: nTSr})
	c := &ChildSA{Name: peer.Name, Child: conf.name, Local: sa.local, Remote: sa.remote,
		InSPI: inSPI, OutSPI: binary.BigEndian.Uint32(chosen.SPI),
		Suite: esp.ESPName(), ESN: esp.ESN,
		InKey: ck.EncI, InAuthKey: ck.IntegI, OutKey: ck.EncR, OutAuthKey: ck.IntegR,
		LocalTS: nTSr, RemoteTS: nTSi, Encap: sa.encap,
		IKESPIi: sa.spii, IKESPIr: sa.spir}
	return resp, append(dropped, sa.establishLocked(c)...)
}

// infoRequestLocked handles an INFORMATIONAL request (section 1.4):
// Delete payloads for the IKE SA or our Child SA; anything else is
// answered empty (a liveness check).
func (sa *ikeSA) infoRequestLocked(inner []Payload) (resp []Payload, after []func(), remove bool) {
	e := sa.ep
	for _, p := range inner {
		d, ok := p.(*Delete)
		if !ok {
			continue
		}
		switch d.Protocol {
		case ProtoIKE:
			e.cfg.Log.Info("ike: peer deleted the IKE SA", sa.logAttrs()...)
			return nil, nil, true
		case ProtoESP:
			// The SPIs are the peer's inbound ones, our outbound; the
			// answer names ours (section 1.4.1).
			var ours []uint32
			for _, spi := range d.SPIs {
				for _, c := range sa.children {
					if spi == c.OutSPI {
						e.cfg.Log.Debug("ike: peer deleted a Child SA", sa.logAttrs("child", c.Child, "in_spi", ESPSPI(c.InSPI), "out_spi", ESPSPI(c.OutSPI))...)
						ours = append(ours, c.InSPI)
						after = append(after, sa.dropChildLocked(c)...)
						break
					}
				}
			}
			if len(ours) > 0 {
				resp = append(resp, &Delete{Protocol: ProtoESP, SPIs: ours})
			}
		}
	}
	return resp, after, false
}

// responseLocked handles a response to our outstanding request.
func (sa *ikeSA) responseLocked(local, remote netip.AddrPort, raw []byte, m *Message) []func() {
	e := sa.ep
	if sa.job != 0 {
		e.stats.RxBusy++
		return nil
	}
	p := sa.pending
	if p == nil || m.Header.MessageID != p.id || m.Header.Exchange != p.exch {
		e.stats.RxUnexpected++
		return nil
	}
	if sa.state == stateInitSent {
		return sa.initResponseLocked(m, raw)
	}
	inner, _, done := sa.openLocked(&sa.fragResp, raw, m)
	if !done {
		return nil
	}
	e.stats.countExchange(p.exch, true)
	sa.lastHeard = e.cfg.clock.Now()
	sa.stopTimerLocked()
	sa.pending = nil
	sa.changedLocked()
	var after []func()
	switch {
	case sa.state == stateAuthSent:
		after = sa.authResponseLocked(inner)
	case sa.state == stateDeleting || p.kind == reqDeleteIKE:
		e.stats.Deleted++
		return e.removeLocked(sa, errDeleted)
	case p.kind == reqRekey || p.kind == reqNewChild:
		after = sa.rekeyResponseLocked(p.rekey, inner)
	case p.kind == reqRekeyIKE:
		after = sa.ikeRekeyResponseLocked(p.ikeRekey, inner)
	case p.kind == reqDeleteChild:
		after = append(sa.dropChildLocked(p.old), reply(p.waiter, p.next, nil)...)
	}
	if !sa.removed {
		after = append(after, sa.idleLocked()...)
	}
	return after
}

// makeAuth returns our AUTH payload: a signature when the peer
// configuration has a Signer, else the PSK MAC (section 2.15). firstMsg is
// our first message, peerNonce the other side's nonce, skp our SK_p,
// hashes the peer's N(SIGNATURE_HASH_ALGORITHMS). It uses no IKE SA state,
// so it runs off the lock (job.go).
func makeAuth(prf PRF, hashes []uint16, peer *Peer, firstMsg, peerNonce, skp []byte, id *ID) (*Auth, error) {
	if peer.Signer != nil {
		return signAuth(peer.AuthMethod, peer.Signer, signedOctets(prf, firstMsg, peerNonce, skp, idBody(id)), hashes)
	}
	return &Auth{Method: AuthPSK, Data: PSKAuth(prf, peer.PSK, firstMsg, peerNonce, skp, idBody(id))}, nil
}

// checkAuth verifies the peer's AUTH: a signature by a certificate that
// chains to RemoteCAs and names id when those are configured, else the
// PSK MAC. firstMsg is the peer's first message, ourNonce ours, skp the
// peer's SK_p. It uses no IKE SA state, so it runs off the lock.
func checkAuth(prf PRF, peer *Peer, inner []Payload, auth *Auth, firstMsg, ourNonce, skp []byte, id *ID) error {
	if len(peer.RemoteCAs) > 0 {
		if auth.Method == AuthPSK {
			return errors.New("ike: PSK AUTH where a certificate is required")
		}
		pub, err := verifyPeerCert(inner, peer, id)
		if err != nil {
			return err
		}
		return verifyAuth(auth, pub, signedOctets(prf, firstMsg, ourNonce, skp, idBody(id)))
	}
	want := PSKAuth(prf, peer.PSK, firstMsg, ourNonce, skp, idBody(id))
	if auth.Method != AuthPSK || subtle.ConstantTimeCompare(want, auth.Data) != 1 {
		return errors.New("ike: PSK AUTH does not verify")
	}
	return nil
}

// certPayloads returns our CERT payloads (none without a Signer).
func certPayloads(peer *Peer) []Payload {
	if peer.Signer == nil {
		return nil
	}
	var ps []Payload
	for _, c := range peer.Certificates {
		ps = append(ps, &Cert{Encoding: CertX509Signature, Data: c.Raw})
	}
	return ps
}
