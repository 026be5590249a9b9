package ike

// Authentication in IKE_AUTH (sections 1.2, 2.15): IDi and IDr, our CERT
// payloads, AUTH (a PSK MAC or a signature, auth.go), N(INITIAL_CONTACT)
// (2.4), and the responder's choice of peer configuration by the
// initiator's identity. Signing and verifying run off the lock.
//
// With EAP (section 2.16; the responder is the EAP server) the initiator's
// first request carries no AUTH: the responder picks a peer for which
// usesEAPServer holds, answers with its own AUTH and goes on for as many
// rounds as the EAP task needs; the initiator's AUTH then arrives in a
// round of its own, a MAC with the key EAP made (setup.msk), and the
// responder answers with its AUTH made the same way. That round is the
// only one after EAP-Success: a request without AUTH there is refused
// with AUTHENTICATION_FAILED, so the rounds stay bounded by the EAP
// session's cap plus one.

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
)

func init() { registerTask(IKE_AUTH, orderAuth, newAuthTask) }

// EAP's hooks into authentication, registered from init functions:
// onPeerAuthEAP(f) says that the responder authenticates the initiators
// of the peers f holds for with EAP (an EAP server task); onLocalAuthEAP(f)
// that we, as initiator, authenticate to them with EAP (an EAP client
// task): the first IKE_AUTH request then carries no AUTH; the responder's
// AUTH is verified as configured, and once the EAP client task set
// setup.msk, our AUTH and the responder's last one are MACs with it.
var eapServerHooks, eapClientHooks []func(*Peer) bool

func onPeerAuthEAP(f func(*Peer) bool)  { eapServerHooks = append(eapServerHooks, f) }
func onLocalAuthEAP(f func(*Peer) bool) { eapClientHooks = append(eapClientHooks, f) }

// peerAuthEAP reports whether the responder authenticates p's initiators
// with EAP: an EAP task may also set it (the first tasks-ready note said
// so); the hooks count too.
var peerAuthEAP = func(p *Peer) bool { return false }

// localAuthEAP reports whether we authenticate to p with EAP; as
// peerAuthEAP.
var localAuthEAP = func(p *Peer) bool { return false }

func usesEAPServer(p *Peer) bool { return peerAuthEAP(p) || anyHook(eapServerHooks, p) }
func usesEAPClient(p *Peer) bool { return localAuthEAP(p) || anyHook(eapClientHooks, p) }

func anyHook(hs []func(*Peer) bool, p *Peer) bool {
	for _, f := range hs {
		if f(p) {
			return true
		}
	}
	return false
}

type authTask struct {
	idi, ourID     *ID
	idr            *ID // initiator: the responder's, from its first response
	ourAuth        *Auth
	initialContact bool // responder: the first request carried N(INITIAL_CONTACT)
	answered       bool // responder: our first AUTH has gone out (EAP)
	sentMSK        bool // initiator (EAP): our AUTH with the MSK has gone out
	respVerified   bool // initiator (EAP): the responder's first AUTH verified
}

func newAuthTask(*ikeSA) task { return &authTask{} }

func (t *authTask) build(x *exchange) taskStatus {
	sa := x.sa
	if sa.initiator {
		return t.buildRequest(x)
	}
	switch {
	case t.ourAuth == nil:
		return taskMore // EAP's rounds
	case !t.answered:
		t.answered = true
		x.add(t.ourID)
		x.add(certPayloads(x.setup.peer)...)
	}
	x.add(t.ourAuth)
	t.ourAuth = nil
	if x.setup.peerAuthed {
		return taskDone
	}
	return taskMore
}

// buildRequest is the initiator's: IDi, CERT, [IDr], AUTH,
// N(INITIAL_CONTACT), with the signature made off the lock.
func (t *authTask) buildRequest(x *exchange) taskStatus {
	sa := x.sa
	peer := sa.peer
	idi := &ID{IDType: peer.LocalID.Type, Data: peer.LocalID.Data}
	prf, hashes, initReq, nr, extra := sa.prf, sa.hashes, sa.initReq, sa.nr, x.setup.authOctets
	pi := bytes.Clone(sa.keys.Pi)
	if x.round == 0 && usesEAPClient(peer) {
		// EAP: no AUTH of ours before EAP made the MSK.
		x.setup.eap = true
		t.idi = idi
		x.add(idi)
		if !peer.RemoteID.IsZero() {
			x.add(&ID{Responder: true, IDType: peer.RemoteID.Type, Data: peer.RemoteID.Data})
		}
		x.add(initialContact(x.sa)...) // not on a reauthentication (reauth.go)
		return taskMore
	}
	if x.setup.eap {
		if x.setup.msk == nil || t.sentMSK {
			return taskMore // EAP's rounds
		}
		t.sentMSK = true
		x.add(&Auth{Method: AuthPSK, Data: keyedAuth(prf, x.setup.msk, authOctets(prf, initReq, nr, pi, t.idi, extra))})
		return taskMore
	}
	return x.offLock(func() func() taskStatus {
		auth, err := makeAuth(prf, hashes, peer, nil, authOctets(prf, initReq, nr, pi, idi, extra), true)
		return func() taskStatus {
			if err != nil {
				return x.fail(0, err)
			}
			x.add(idi)
			x.add(certPayloads(peer)...)
			if !peer.RemoteID.IsZero() {
				x.add(&ID{Responder: true, IDType: peer.RemoteID.Type, Data: peer.RemoteID.Data})
			}
			x.add(auth)
			x.add(initialContact(x.sa)...) // not on a reauthentication (reauth.go)
			return taskMore
		}
	})
}

func (t *authTask) process(x *exchange) taskStatus {
	if x.sa.initiator {
		return t.processResponse(x)
	}
	return t.processRequest(x)
}

// processResponse is the initiator's: the responder's IDr and AUTH,
// verified off the lock.
func (t *authTask) processResponse(x *exchange) taskStatus {
	sa, e := x.sa, x.sa.ep
	inner := x.in
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
		return x.fail(0, fmt.Errorf("ike: responder answered IKE_AUTH with %s", notifyName(n.NType)))
	}
	var msk []byte
	if x.setup.eap {
		switch {
		case t.sentMSK:
			msk = x.setup.msk // the responder's last AUTH, with the MSK
		case t.respVerified:
			return taskMore // EAP's rounds
		}
	}
	idr, ok1 := find[*ID](inner, isResponderID)
	if msk != nil && t.idr != nil {
		idr, ok1 = t.idr, true // the last response has AUTH without IDr
	}
	auth, ok2 := find[*Auth](inner, nil)
	if !ok1 || !ok2 {
		return x.fail(0, errors.New("ike: IKE_AUTH response lacks IDr or AUTH"))
	}
	t.idr = idr
	peer := sa.peer
	sa.remoteID = Identity{idr.IDType, bytes.Clone(idr.Data)}
	if !peer.RemoteID.IsZero() && !peer.RemoteID.equal(idr) {
		e.stats.AuthFailed++
		sa.deleteBestEffortLocked()
		return x.fail(0, fmt.Errorf("ike: responder identified as %v, not %v", Identity{idr.IDType, idr.Data}, peer.RemoteID))
	}
	prf, initResp, ni, extra := sa.prf, sa.initResp, sa.ni, x.setup.authOctets
	pr := bytes.Clone(sa.keys.Pr)
	return x.offLock(func() func() taskStatus {
		err := checkAuth(prf, peer, msk, inner, auth, authOctets(prf, initResp, ni, pr, idr, extra), idr)
		return func() taskStatus {
			if err != nil {
				e.stats.AuthFailed++
				sa.deleteBestEffortLocked()
				return x.fail(0, fmt.Errorf("ike: the responder's AUTH (as %v): %w", Identity{idr.IDType, idr.Data}, err))
			}
			if x.setup.eap && msk == nil {
				t.respVerified = true
				return taskMore // EAP's rounds, then our AUTH with the MSK
			}
			x.setup.peerAuthed = true
			e.cfg.Log.Debug("ike: peer authenticated", sa.logAttrs("remote_id", sa.remoteID, "auth", authName(auth.Method))...)
			return taskDone
		}
	})
}

// processRequest is the responder's: the first request names the
// initiator and picks the peer configuration; its AUTH (or, with EAP, the
// AUTH of a later round) is verified and ours made, off the lock.
func (t *authTask) processRequest(x *exchange) taskStatus {
	sa, e := x.sa, x.sa.ep
	inner := x.in
	auth, hasAuth := find[*Auth](inner, nil)
	if t.idi == nil {
		idi, ok := find[*ID](inner, isInitiatorID)
		if !ok {
			err := errors.New("ike: IKE_AUTH request lacks IDi")
			e.authRefused(slog.LevelWarn, "ike: IKE_AUTH refused; AUTHENTICATION_FAILED", "remote", x.remote, "err", err)
			return t.refuse(x, err)
		}
		idr, hasIDr := find[*ID](inner, isResponderID)
		peer := t.choosePeer(x, idi, idr, hasIDr, auth, hasAuth)
		if peer == nil {
			method := "eap"
			if hasAuth {
				method = authName(auth.Method)
			}
			err := errors.New("ike: no connection for the initiator's identity")
			e.authRefused(slog.LevelWarn, "ike: no connection for the initiator's identity; AUTHENTICATION_FAILED", "remote_id", Identity{idi.IDType, idi.Data},
				"remote", x.remote, "auth", method, "err", err)
			return t.refuse(x, err)
		}
		t.idi = idi
		t.ourID = &ID{Responder: true, IDType: peer.LocalID.Type, Data: peer.LocalID.Data}
		t.initialContact = findNotify(inner, InitialContact) != nil
		x.setup.peer = peer
		x.setup.eap = !hasAuth
	}
	peer := x.setup.peer
	if !hasAuth {
		if x.setup.eap && x.setup.msk != nil {
			// EAP succeeded in our last response: this request must carry
			// the initiator's AUTH (section 2.16). Without, no more rounds:
			// the EAP session's cap (eap.Config.MaxRounds) no longer holds.
			err := errors.New("ike: IKE_AUTH request without AUTH after EAP-Success")
			e.authRefused(slog.LevelWarn, "ike: IKE_AUTH refused; AUTHENTICATION_FAILED", "peer", peer.Name, "remote", x.remote,
				"remote_id", Identity{t.idi.IDType, t.idi.Data}, "err", err)
			return t.refuse(x, err)
		}
		if t.answered || !x.setup.eap {
			return taskMore // a round of EAP's
		}
		// EAP: our AUTH now, the initiator's once EAP is done.
		prf, hashes, initResp, ni, ourID, extra := sa.prf, sa.hashes, sa.initResp, sa.ni, t.ourID, x.setup.authOctets
		pr := bytes.Clone(sa.keys.Pr)
		return x.offLock(func() func() taskStatus {
			ourAuth, err := makeAuth(prf, hashes, peer, nil, authOctets(prf, initResp, ni, pr, ourID, extra), true)
			return func() taskStatus {
				if err != nil {
					e.authRefused(slog.LevelError, "ike: cannot make our AUTH; AUTHENTICATION_FAILED", "peer", peer.Name, "remote", x.remote,
						"remote_id", Identity{t.idi.IDType, t.idi.Data}, "err", err)
					return t.refuse(x, err)
				}
				t.ourAuth = ourAuth
				return taskMore
			}
		})
	}
	if x.setup.eap && x.setup.msk == nil {
		err := errors.New("ike: AUTH before EAP completed")
		e.authRefused(slog.LevelWarn, "ike: IKE_AUTH refused; AUTHENTICATION_FAILED", "peer", peer.Name, "remote", x.remote,
			"remote_id", Identity{t.idi.IDType, t.idi.Data}, "err", err)
		return t.refuse(x, err)
	}
	prf, hashes, initReq, initResp, ni, nr, extra, msk := sa.prf, sa.hashes, sa.initReq, sa.initResp, sa.ni, sa.nr, x.setup.authOctets, x.setup.msk
	pi, pr := bytes.Clone(sa.keys.Pi), bytes.Clone(sa.keys.Pr)
	idi, ourID := t.idi, t.ourID
	return x.offLock(func() func() taskStatus {
		verr := checkAuth(prf, peer, msk, inner, auth, authOctets(prf, initReq, nr, pi, idi, extra), idi)
		var ourAuth *Auth
		var serr error
		if verr == nil {
			ourAuth, serr = makeAuth(prf, hashes, peer, msk, authOctets(prf, initResp, ni, pr, ourID, extra), msk == nil)
		}
		return func() taskStatus {
			switch {
			case verr != nil:
				e.authRefused(slog.LevelWarn, "ike: initiator's AUTH does not verify; AUTHENTICATION_FAILED", "peer", peer.Name,
					"remote_id", Identity{idi.IDType, idi.Data}, "remote", x.remote, "auth", authName(auth.Method), "err", verr)
				return t.refuse(x, verr)
			case serr != nil:
				e.authRefused(slog.LevelError, "ike: cannot make our AUTH; AUTHENTICATION_FAILED", "peer", peer.Name, "remote", x.remote,
					"remote_id", Identity{idi.IDType, idi.Data}, "err", serr)
				return t.refuse(x, serr)
			}
			e.cfg.Log.Debug("ike: peer authenticated", "peer", peer.Name, "remote", x.remote, "remote_id", Identity{idi.IDType, idi.Data},
				"auth", authName(auth.Method), "local_id", peer.LocalID)
			t.ourAuth = ourAuth
			t.authenticatedLocked(x)
			return taskMore
		}
	})
}

// choosePeer is the responder's peer configuration for the initiator
// idi: the first whose addresses, identities, authentication method and
// IKE proposals fit.
func (t *authTask) choosePeer(x *exchange, idi, idr *ID, hasIDr bool, auth *Auth, hasAuth bool) *Peer {
	sa := x.sa
	for _, p := range sa.ep.cfg.Peers {
		if p.Local != x.local.Addr().Unmap() || (p.Remote.IsValid() && p.Remote != x.remote.Addr().Unmap()) {
			continue
		}
		if !p.RemoteID.IsZero() && !p.RemoteID.equal(idi) {
			continue
		}
		if hasIDr && !p.LocalID.equal(idr) {
			continue
		}
		if hasAuth {
			if usesEAPServer(p) || (len(p.RemoteCAs) > 0) == (auth.Method == AuthPSK) {
				continue
			}
		} else if !usesEAPServer(p) {
			continue
		}
		if _, err := checkChosen(p.IKE, Proposal{Protocol: ProtoIKE, Transforms: sa.suite.transforms()}, false); err != nil {
			continue
		}
		return p
	}
	return nil
}

// authenticatedLocked makes the verified initiator the IKE SA's peer;
// with INITIAL_CONTACT (section 2.4), the IKE SAs we still hold for its
// identity go: it has none with us any more.
func (t *authTask) authenticatedLocked(x *exchange) {
	sa, e := x.sa, x.sa.ep
	sa.peer = x.setup.peer
	sa.remoteID = Identity{t.idi.IDType, bytes.Clone(t.idi.Data)}
	if !x.setup.eapID.IsZero() {
		sa.remoteID = x.setup.eapID // what EAP proved, not IDi (task_eap.go)
	}
	x.setup.peerAuthed = true
	if !t.initialContact {
		return
	}
	for _, o := range e.sas {
		if o != sa && o.peer == sa.peer && o.state >= stateEstablished && o.remoteID.Equal(sa.remoteID) {
			e.stats.InitialContacts++
			e.stats.Deleted++
			e.cfg.Log.Info("ike: INITIAL_CONTACT: dropping the peer's old IKE SA", o.logAttrs()...)
			x.later(e.removeLocked(o, errors.New("ike: the peer restarted (INITIAL_CONTACT)"))...)
		}
	}
}

// refuse fails the responder's IKE_AUTH with AUTHENTICATION_FAILED.
func (t *authTask) refuse(x *exchange, err error) taskStatus {
	x.sa.ep.stats.AuthFailed++
	return x.fail(AuthenticationFailed, err)
}

// authOctets are what AUTH signs or MACs (section 2.15): the sender's
// first message, the other side's nonce, prf(SK_p, ID body), and extra
// (RFC 9242's IntAuth; nil without).
func authOctets(prf PRF, firstMsg, peerNonce, skp []byte, id *ID, extra []byte) []byte {
	return append(signedOctets(prf, firstMsg, peerNonce, skp, idBody(id)), extra...)
}

// makeAuth returns our AUTH payload over octets: a MAC with msk (EAP,
// section 2.16) when it is set, else a signature when the peer
// configuration has a Signer (sign), else the PSK MAC (section 2.15).
// hashes are the peer's N(SIGNATURE_HASH_ALGORITHMS). It uses no IKE SA
// state, so it runs off the lock.
func makeAuth(prf PRF, hashes []uint16, peer *Peer, msk, octets []byte, sign bool) (*Auth, error) {
	if msk != nil {
		return &Auth{Method: AuthPSK, Data: keyedAuth(prf, msk, octets)}, nil
	}
	if sign && peer.Signer != nil {
		return signAuth(peer.AuthMethod, peer.Signer, octets, hashes)
	}
	return &Auth{Method: AuthPSK, Data: keyedAuth(prf, peer.PSK, octets)}, nil
}

// keyedAuth is AUTH with a shared key (section 2.15):
// prf(prf(key, "Key Pad for IKEv2"), octets).
func keyedAuth(prf PRF, key, octets []byte) []byte {
	return prf.Sum(prf.Sum(key, []byte(keyPad)), octets)
}

// checkAuth verifies the peer's AUTH over octets: a MAC with msk (EAP)
// when it is set; else a signature by a certificate that chains to
// RemoteCAs and names id when those are configured; else the PSK MAC. It
// uses no IKE SA state, so it runs off the lock.
func checkAuth(prf PRF, peer *Peer, msk []byte, inner []Payload, auth *Auth, octets []byte, id *ID) error {
	key := peer.PSK
	switch {
	case msk != nil:
		key = msk
	case len(peer.RemoteCAs) > 0:
		if auth.Method == AuthPSK {
			return errors.New("ike: PSK AUTH where a certificate is required")
		}
		pub, err := verifyPeerCert(inner, peer, id)
		if err != nil {
			return err
		}
		return verifyAuth(auth, pub, octets)
	}
	want := keyedAuth(prf, key, octets)
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
