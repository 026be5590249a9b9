package ike

// One IKE SA: its state, its request and response windows, the
// responder's defences before it exists (cookies, half-open limits; the
// setup exchanges themselves are tasks, task.go), and INFORMATIONAL
// (Delete, liveness). Every function with a Locked
// suffix runs with Endpoint.mu held and returns the callbacks to run after
// it is released.

import (
	"context"
	"crypto/rand"
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
	// tasks process the response (startLocked); nil for a request a
	// snapshot carried over, whose kind names them (requestTasks).
	tasks []task
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
	released  bool              // removed by Release: another member goes on with it, so no OnDelete
	job       uint64            // a computation off the lock is in flight (job.go)
	backlog   []func() []func() // messages that arrived meanwhile (Endpoint.dispatchLocked)
	// waitsFor is the IKE SA whose rekey collided with the peer's that
	// made this one (answered first): until the answer to ours decides
	// the collision (ikeRekeyResponseLocked), this one's messages wait in
	// its backlog (dispatchLocked), so that the peer's Delete of this one
	// never overtakes the move of the Child SAs, even when the peer's
	// messages arrive out of order or g^ir runs off the lock.
	waitsFor *ikeSA
	frag     bool   // both sides announced IKE fragmentation (frag.go)
	setup    *setup // the setup exchanges' state until it is established (task.go)

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
	natThere bool      // NAT detection found the peer's address translated: follow its mapping (natupdate.go)
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

	// Feature state that outlives the setup; an IKE SA rekey carries it
	// to the new IKE SA (moveChildrenLocked). One block per feature.
	leases []vipLease   // configuration payloads: virtual IPs leased to the peer (task_config.go)
	vips   []netip.Addr // configuration payloads: the virtual IPs handed out (responder) or received (initiator)
	mobike bool         // MOBIKE: both announced MOBIKE_SUPPORTED
	reauth *reauthState // reauthentication: its timer, or the IKE SA this one replaces (reauth.go)

	snapDirty bool // its replicated state changed since OnSnapshot last saw it (snapshot.go)
	snapShown bool // OnSnapshot has seen it: its end is reported
}

// The IKE SA's states, as predicates: sa.state says where its setup
// stands (stateInitSent, stateAuthSent as initiator, stateHalfOpen as
// responder) and whether it is up (stateEstablished) or our Delete of it
// is out (stateDeleting); rekeyed and removed say it is being replaced or
// is gone.

// up reports whether sa is established and carries on: not being
// deleted, replaced by a rekey or gone. New requests go on such an IKE SA
// only.
func (sa *ikeSA) up() bool {
	return sa.state == stateEstablished && !sa.rekeyed && !sa.removed
}

// settingUp reports whether sa's setup exchanges are under way.
func (sa *ikeSA) settingUp() bool { return sa.setup != nil && !sa.removed }

// windowFree reports whether a request of ours can go on sa now: it is
// up, none is outstanding and none waits before it.
func (sa *ikeSA) windowFree() bool {
	return sa.up() && sa.pending == nil && len(sa.queue) == 0 && sa.job == 0
}

func (sa *ikeSA) ourSPI() uint64 {
	if sa.initiator {
		return sa.spii
	}
	return sa.spir
}

// setAddrsLocked moves sa to new addresses (the NAT-T port, MOBIKE's
// UPDATE_SA_ADDRESSES): its requests and responses go there from now on.
func (sa *ikeSA) setAddrsLocked(local, remote netip.AddrPort) {
	if sa.local == local && sa.remote == remote {
		return
	}
	sa.local, sa.remote = local, remote
	sa.changedLocked()
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

// notifyName is t's IANA name, or "notify N" for a type it does not
// know.
func notifyName(t NotifyType) string {
	if n, ok := notifyNames[t]; ok {
		return n
	}
	return fmt.Sprintf("notify %d", uint16(t))
}

// notifyNames are the IANA names of the notify types (RFC 7296 section
// 3.10.1 and the RFCs of the features here: MOBIKE RFC 4555, EAP-only
// RFC 5998, IKE_INTERMEDIATE RFC 9242, additional key exchanges RFC
// 9370), and of status types peers send that this package does not act
// on.
var notifyNames = map[NotifyType]string{
	UnsupportedCriticalPayload: "UNSUPPORTED_CRITICAL_PAYLOAD",
	InvalidIKESPI:              "INVALID_IKE_SPI",
	InvalidMajorVersion:        "INVALID_MAJOR_VERSION",
	InvalidSyntax:              "INVALID_SYNTAX",
	InvalidMessageID:           "INVALID_MESSAGE_ID",
	InvalidSPI:                 "INVALID_SPI",
	NoProposalChosen:           "NO_PROPOSAL_CHOSEN",
	InvalidKEPayload:           "INVALID_KE_PAYLOAD",
	AuthenticationFailed:       "AUTHENTICATION_FAILED",
	SinglePairRequired:         "SINGLE_PAIR_REQUIRED",
	NoAdditionalSAs:            "NO_ADDITIONAL_SAS",
	InternalAddressFailure:     "INTERNAL_ADDRESS_FAILURE",
	FailedCPRequired:           "FAILED_CP_REQUIRED",
	TSUnacceptable:             "TS_UNACCEPTABLE",
	InvalidSelectors:           "INVALID_SELECTORS",
	UnacceptableAddresses:      "UNACCEPTABLE_ADDRESSES",
	UnexpectedNATDetected:      "UNEXPECTED_NAT_DETECTED",
	TemporaryFailure:           "TEMPORARY_FAILURE",
	ChildSANotFound:            "CHILD_SA_NOT_FOUND",

	InitialContact:                "INITIAL_CONTACT",
	SetWindowSize:                 "SET_WINDOW_SIZE",
	AdditionalTSPossible:          "ADDITIONAL_TS_POSSIBLE",
	IPCompSupported:               "IPCOMP_SUPPORTED",
	NATDetectionSourceIP:          "NAT_DETECTION_SOURCE_IP",
	NATDetectionDestinationIP:     "NAT_DETECTION_DESTINATION_IP",
	Cookie:                        "COOKIE",
	UseTransportMode:              "USE_TRANSPORT_MODE",
	RekeySA:                       "REKEY_SA",
	ESPTFCPaddingNotSupported:     "ESP_TFC_PADDING_NOT_SUPPORTED",
	NonFirstFragmentsAlso:         "NON_FIRST_FRAGMENTS_ALSO",
	MOBIKESupported:               "MOBIKE_SUPPORTED",
	AdditionalIP4Address:          "ADDITIONAL_IP4_ADDRESS",
	AdditionalIP6Address:          "ADDITIONAL_IP6_ADDRESS",
	NoAdditionalAddresses:         "NO_ADDITIONAL_ADDRESSES",
	UpdateSAAddresses:             "UPDATE_SA_ADDRESSES",
	Cookie2:                       "COOKIE2",
	NoNATsAllowed:                 "NO_NATS_ALLOWED",
	16404:                         "MULTIPLE_AUTH_SUPPORTED",
	16406:                         "REDIRECT_SUPPORTED",
	16417:                         "EAP_ONLY_AUTHENTICATION",
	16418:                         "CHILDLESS_IKEV2_SUPPORTED",
	FragmentationSupported:        "IKEV2_FRAGMENTATION_SUPPORTED",
	SignatureHashAlgorithms:       "SIGNATURE_HASH_ALGORITHMS",
	IntermediateExchangeSupported: "INTERMEDIATE_EXCHANGE_SUPPORTED",
	AdditionalKeyExchange:         "ADDITIONAL_KEY_EXCHANGE",
}

// ---------------------------------------------------------------------
// Initiator

// newInitiatorLocked makes an IKE SA with peer and sends its IKE_SA_INIT
// request; w learns the outcome.
func (e *Endpoint) newInitiatorLocked(peer *Peer, dh DH, w chan result) (*ikeSA, []func()) {
	sa := &ikeSA{ep: e, peer: peer, initiator: true, waiter: w,
		local:  netip.AddrPortFrom(peer.Local, e.cfg.Port),
		remote: netip.AddrPortFrom(peer.Remote, e.cfg.Port),
		ni:     randomNonce(), dh: dh}
	sa.spii = e.newSPILocked()
	e.sas[sa.spii] = sa
	return sa, sa.startSetupLocked()
}

// failLocked ends a negotiation we initiated with err.
func (sa *ikeSA) failLocked(err error) []func() {
	sa.ep.cfg.Log.Warn("ike: negotiation failed", sa.logAttrs("err", err)...)
	return sa.ep.removeLocked(sa, err)
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
	sa.sentLocked(sa.local, sa.remote)
	sa.armLocked()
	return nil
}

// establishLocked ends sa's setup: the IKE SA is up, with c, the Child
// SA IKE_AUTH made, if any (a responder's IKE SA stays up without it).
func (sa *ikeSA) establishLocked(c *ChildSA) []func() {
	if sa.halfOpenTimer != nil {
		sa.halfOpenTimer.Stop()
	}
	sa.ep.dropHalfOpenLocked(sa)
	sa.state = stateEstablished
	sa.setup = nil
	sa.ep.stats.IKESAEstablished++
	sa.startTimersLocked()
	var after []func()
	if c != nil {
		after = sa.addChildLocked(c)
	}
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
	ent := &childEntry{c: c, sa: sa, local: c.Local, remote: c.Remote}
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
	_, ok1 := find[*SA](ps, nil)
	_, ok2 := find[*KE](ps, nil)
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
	// The SA is half open once its tasks (task_ikeinit.go) chose a
	// peer, a proposal and a group (addResponderLocked).
	sa := &ikeSA{ep: e, local: local, remote: remote, hoKey: key, state: stateHalfOpen,
		spii: h.SPIi, initReq: raw, nextPeer: 1}
	x := sa.newExchangeLocked(IKE_SA_INIT)
	x.setup.pressure = pressure
	if !x.acquireLocked() {
		return nil // counted; the initiator retransmits
	}
	x.local, x.remote = local, remote
	x.in, x.inRaw, x.hdr = ps, raw, h
	x.beginLocked(stepProcess)
	return x.runLocked()
}

// addResponderLocked registers sa, a responder's IKE SA whose IKE_SA_INIT
// is being answered, as half open: under its SPI, against MaxHalfOpen and
// BlockThreshold, for HalfOpenTimeout (shorter under pressure).
func (e *Endpoint) addResponderLocked(sa *ikeSA, pressure bool) {
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

// requestLocked handles a request from the peer on an existing SA:
// retransmissions are answered from the cache, anything outside the
// window is dropped, and the rest is decrypted and answered.
func (sa *ikeSA) requestLocked(local, remote netip.AddrPort, raw []byte, m *Message) []func() {
	e := sa.ep
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
				sa.sentLocked(sa.respLocal, sa.respRem)
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
	// Authenticated and new (the next message ID): a peer behind a NAT
	// may have a new mapping (natupdate.go).
	moved := sa.followPeerLocked(local, remote)
	if _, ok := find[*Unknown](inner, func(u *Unknown) bool { return u.Critical }); ok {
		e.stats.RxUnsupportedCrit++
	}
	if sa.setup != nil && !sa.initiator {
		if after, ok := sa.setupRequestLocked(local, remote, raw, m, inner); ok {
			return after
		}
	}
	if (m.Header.Exchange == INFORMATIONAL && sa.state >= stateEstablished) ||
		(m.Header.Exchange == CREATE_CHILD_SA && sa.state == stateEstablished) {
		if after, ok := sa.answerLocked(local, remote, raw, m, inner); ok {
			return append(moved, after...)
		}
	}
	sa.nextPeer++
	sa.lastHeard = e.cfg.clock.Now()
	return append(moved, sa.respondLocked(local, remote, raw, m.Header.Exchange, id, []Payload{&Notify{NType: InvalidSyntax}}, nil, sa.state == stateHalfOpen)...)
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
			sa.sentLocked(local, remote)
		} else {
			sa.respHeld = true
			after = append(after, func() {
				e.mu.Lock()
				sa.respHeld = false
				if !e.closed {
					e.sendAllLocked(local, remote, pkts)
					sa.sentLocked(local, remote)
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

// responseLocked handles a response to our outstanding request.
func (sa *ikeSA) responseLocked(local, remote netip.AddrPort, raw []byte, m *Message) []func() {
	e := sa.ep
	p := sa.pending
	if p == nil || m.Header.MessageID != p.id || m.Header.Exchange != p.exch {
		e.stats.RxUnexpected++
		return nil
	}
	if sa.setup != nil {
		return sa.setupResponseLocked(m, raw)
	}
	inner, _, done := sa.openLocked(&sa.fragResp, raw, m)
	if !done {
		return nil
	}
	// Authenticated, and the answer to our outstanding request (never
	// a replay): a peer behind a NAT may have a new mapping
	// (natupdate.go).
	moved := sa.followPeerLocked(local, remote)
	e.stats.countExchange(p.exch, true)
	sa.lastHeard = e.cfg.clock.Now()
	sa.stopTimerLocked()
	sa.pending = nil
	sa.changedLocked()
	x := &exchange{sa: sa, typ: p.exch, tasks: sa.requestTasks(p), ours: true, in: inner, inRaw: raw, hdr: &m.Header}
	x.beginLocked(stepProcess)
	return append(moved, x.runLocked()...)
}
