package ike

// EAP in IKE_AUTH with sluice as the EAP server (RFC 7296 section 2.16),
// responder only. task_auth.go picks a peer with Peer.EAP for an initiator
// whose first request has no AUTH and answers that round with IDr, CERT
// and our AUTH; this task adds the EAP payloads, one per round:
//
//	round 0    request: IDi, [IDr], SA, TSi, TSr (no AUTH)
//	           response: IDr, CERT, AUTH, EAP(Request: Identity or method)
//	rounds 1.. request: EAP(Response)  response: EAP(Request), ...
//	           ... until the response carries EAP(Success) (setup.msk set)
//	           or the session fails: N(AUTHENTICATION_FAILED), the IKE SA
//	           forgotten
//	last       request: AUTH (a MAC with the MSK)
//	           response: AUTH (MSK), SA, TSi, TSr (task_auth.go, task_child.go)
//
// Each Response is handled off the lock: EAP-TLS signs and verifies in it.

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/sluicegw/sluice/ike/eap"
)

func init() {
	registerTask(IKE_AUTH, orderEAP, newEAPTask)
	onPeerAuthEAP(func(p *Peer) bool { return p.EAP != nil })
}

type eapTask struct {
	srv *eap.Server
	out []byte // the EAP message for our response of the round
}

func newEAPTask(sa *ikeSA) task {
	if sa.initiator {
		return nil // sluice is no EAP client
	}
	return &eapTask{}
}

func (t *eapTask) process(x *exchange) taskStatus {
	if !x.setup.eap || x.setup.peer.EAP == nil {
		return taskDone // the initiator authenticates with AUTH, or another EAP task serves the peer
	}
	e := x.sa.ep
	if t.srv == nil {
		srv, err := eap.NewServer(x.setup.peer.EAP)
		if err != nil {
			e.cfg.Log.Error("ike: EAP", "peer", x.setup.peer.Name, "err", err)
			return t.refuse(x, err)
		}
		out, err := srv.Start()
		if err != nil {
			srv.Close()
			return t.refuse(x, err)
		}
		t.srv, t.out = srv, out
		return taskMore
	}
	p, ok := find[*EAP](x.in, nil)
	if !ok {
		t.srv.Close()
		return t.refuse(x, errors.New("ike: IKE_AUTH request without EAP while EAP runs"))
	}
	srv, data := t.srv, p.Data // p.Data aliases x.in, which stays until the round ends
	return x.offLock(func() func() taskStatus {
		out, err := srv.Process(data)
		return func() taskStatus {
			if err != nil {
				e.cfg.Log.Warn("ike: EAP failed; AUTHENTICATION_FAILED", "peer", x.setup.peer.Name, "remote", x.remote,
					"method", srv.Method().String(), "eap_id", srv.Identity(), "err", err)
				return t.refuse(x, err)
			}
			t.out = out
			return taskMore
		}
	})
}

func (t *eapTask) build(x *exchange) taskStatus {
	if t.out == nil {
		return taskDone
	}
	if t.srv.State() == eap.Succeeded {
		if err := t.provenLocked(x); err != nil {
			t.srv.Close()
			return t.refuse(x, err)
		}
	}
	x.add(&EAP{Data: t.out})
	t.out = nil
	if t.srv.State() != eap.Succeeded {
		return taskMore
	}
	msk := t.srv.MSK()
	if msk == nil {
		// Both methods here make one; AUTH with SK_p (section 2.16)
		// would need a key per direction in setup.
		return t.refuse(x, fmt.Errorf("ike: EAP method %s made no MSK", t.srv.Method()))
	}
	x.setup.msk = msk
	x.sa.ep.cfg.Log.Info("ike: EAP succeeded", "peer", x.setup.peer.Name, "remote", x.remote,
		"method", t.srv.Method().String(), "eap_id", t.srv.Identity())
	t.srv.Close()
	return taskDone
}

// provenLocked takes what a succeeded EAP method proved, before its
// Success goes out: an EAP-TLS certificate must pass the peer's CRLs
// (Peer.CRLs, Peer.Revocation, as a certificate in AUTH does), and the
// proven identity (the EAP-MSCHAPv2 user, the certificate's subject)
// becomes the IKE SA's remote identity, which keys its virtual IP's
// lease and INITIAL_CONTACT: IDi, which nothing in EAP authenticates,
// would let one user take another's address and SAs.
func (t *eapTask) provenLocked(x *exchange) error {
	if chains := t.srv.VerifiedChains(); chains != nil {
		if err := x.setup.peer.checkChains(chains, time.Now()); err != nil {
			return fmt.Errorf("ike: EAP-TLS: %w", err)
		}
	}
	id := ParseIdentity(t.srv.Identity())
	if certs := t.srv.PeerCertificates(); len(certs) > 0 {
		id = Identity{Type: IDDERASN1, Data: bytes.Clone(certs[0].RawSubject)}
	}
	if id.IsZero() {
		return errors.New("ike: EAP succeeded without an identity")
	}
	x.setup.eapID = id
	return nil
}

// refuse fails IKE_AUTH with AUTHENTICATION_FAILED (section 2.21.2).
func (t *eapTask) refuse(x *exchange, err error) taskStatus {
	x.sa.ep.stats.AuthFailed++
	return x.fail(AuthenticationFailed, err)
}
