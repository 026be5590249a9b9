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
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicegw/sluice/ike/eap"
)

func init() {
	registerTask(IKE_AUTH, orderEAP, newEAPTask)
	onPeerAuthEAP(func(p *Peer) bool { return p.EAP != nil })
}

type eapTask struct {
	srv *eap.Server
	out []byte   // the EAP message for our response of the round
	idi Identity // the initiator's IDi (unproven), for the log
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
		if idi, ok := find[*ID](x.in, isInitiatorID); ok {
			t.idi = Identity{idi.IDType, bytes.Clone(idi.Data)}
		}
		srv, err := eap.NewServer(x.setup.peer.EAP)
		if err != nil {
			e.authRefused(slog.LevelError, "ike: EAP cannot start; AUTHENTICATION_FAILED", t.logAttrs(x, "err", err)...)
			return t.refuse(x, err)
		}
		out, err := srv.Start()
		if err != nil {
			srv.Close()
			e.authRefused(slog.LevelError, "ike: EAP cannot start; AUTHENTICATION_FAILED", t.logAttrs(x, "err", err)...)
			return t.refuse(x, err)
		}
		t.srv, t.out = srv, out
		return taskMore
	}
	p, ok := find[*EAP](x.in, nil)
	if !ok {
		t.srv.Close()
		err := errors.New("ike: IKE_AUTH request without EAP while EAP runs")
		t.warn(x, err)
		return t.refuse(x, err)
	}
	srv, data := t.srv, p.Data // p.Data aliases x.in, which stays until the round ends
	return x.offLock(func() func() taskStatus {
		out, err := srv.Process(data)
		return func() taskStatus {
			if err != nil {
				t.warn(x, err)
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
		id, err := t.provenLocked(x)
		if err != nil {
			t.srv.Close()
			t.warn(x, err)
			return t.refuse(x, err)
		}
		x.setup.eapID = id
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
		err := fmt.Errorf("ike: EAP method %s made no MSK", t.srv.Method())
		t.warn(x, err)
		return t.refuse(x, err)
	}
	x.setup.msk = msk
	x.sa.ep.cfg.Log.Info("ike: EAP succeeded", "peer", x.setup.peer.Name, "remote", x.remote,
		"method", t.srv.Method().String(), "remote_id", x.setup.eapID, "claimed", t.srv.Claimed())
	t.srv.Close()
	return taskDone
}

// warn logs the refusal err of the session at WARN (authlog.go), with
// the identities tried.
func (t *eapTask) warn(x *exchange, err error) {
	x.sa.ep.authRefused(slog.LevelWarn, "ike: EAP failed; AUTHENTICATION_FAILED", t.logAttrs(x, "err", err)...)
}

// logAttrs are the log attributes of the session: the peer
// configuration, the initiator's address and IDi, the method, and the
// identities tried: the EAP identity claimed (eap_id, or the answer to
// EAP-Identity), the EAP-MSCHAPv2 user, the EAP-TLS certificate's
// subject; then more.
func (t *eapTask) logAttrs(x *exchange, more ...any) []any {
	attrs := []any{"peer", x.setup.peer.Name, "remote", x.remote, "remote_id", t.idi}
	if s := t.srv; s != nil {
		attrs = append(attrs, "method", s.Method().String(), "eap_id", s.Claimed())
		if u := s.Identity(); u != "" {
			attrs = append(attrs, "user", u)
		}
		if certs := s.PeerCertificates(); len(certs) > 0 {
			attrs = append(attrs, "cert", Identity{Type: IDDERASN1, Data: certs[0].RawSubject})
		}
	}
	return append(attrs, more...)
}

// provenLocked takes what a succeeded EAP method proved, before its
// Success goes out: an EAP-TLS certificate must pass the peer's CRLs
// (Peer.CRLs, Peer.Revocation, as a certificate in AUTH does) and name
// the identity the connection requires (eapIdentity); the identity it
// returns becomes the IKE SA's remote identity, which keys its virtual
// IP's lease and INITIAL_CONTACT: IDi, which nothing in EAP
// authenticates, would let one user take another's address and SAs.
func (t *eapTask) provenLocked(x *exchange) (Identity, error) {
	if chains := t.srv.VerifiedChains(); chains != nil {
		if err := x.setup.peer.checkChains(chains, time.Now()); err != nil {
			return Identity{}, fmt.Errorf("ike: EAP-TLS: %w", err)
		}
	}
	var leaf *x509.Certificate
	if certs := t.srv.PeerCertificates(); len(certs) > 0 {
		leaf = certs[0]
	}
	return eapIdentity(x.setup.peer, t.srv.Identity(), leaf)
}

// eapIdentity binds what EAP proved to the identities peer requires and
// returns the identity proven: the EAP-MSCHAPv2 user (user; the method
// matched it against eap_id already), or the EAP-TLS certificate (leaf)
// with its subject as the identity, or, when the subject is empty, the
// subjectAltName that matched (or the first email or DNS name).
//
// With eap_id configured (Peer.EAP.Identity), the certificate must name
// it, by its subject (a DN, compared by value) or a subjectAltName
// (DNS, email, IP address), as the ID of a certificate in AUTH must
// (certNames, RFC 4945 section 3.1). Without (eap_id = "%any"), the
// identity proven must be the connection's remote id when it has one
// (Peer.RemoteID): the peer was chosen by an IDi that nothing verified.
func eapIdentity(peer *Peer, user string, leaf *x509.Certificate) (Identity, error) {
	want, what := peer.RemoteID, "the connection's remote id"
	if peer.EAP != nil && peer.EAP.Identity != "" {
		want, what = ParseIdentity(peer.EAP.Identity), "eap_id"
	}
	if leaf == nil {
		if user == "" {
			return Identity{}, errors.New("ike: EAP succeeded without an identity")
		}
		id := ParseIdentity(user)
		if !want.IsZero() && !want.Equal(id) {
			return Identity{}, fmt.Errorf("ike: EAP authenticated %v, not %v (%s)", id, want, what)
		}
		return id, nil
	}
	subject := Identity{Type: IDDERASN1, Data: bytes.Clone(leaf.RawSubject)}
	if !want.IsZero() && !certNames(leaf, &ID{IDType: want.Type, Data: want.Data}) {
		return Identity{}, fmt.Errorf("ike: the EAP-TLS certificate %v does not name %v (%s)", subject, want, what)
	}
	if len(leaf.Subject.Names) > 0 {
		return subject, nil
	}
	switch {
	case !want.IsZero():
		return Identity{Type: want.Type, Data: bytes.Clone(want.Data)}, nil
	case len(leaf.EmailAddresses) > 0:
		return Identity{Type: IDRFC822, Data: []byte(leaf.EmailAddresses[0])}, nil
	case len(leaf.DNSNames) > 0:
		return Identity{Type: IDFQDN, Data: []byte(leaf.DNSNames[0])}, nil
	}
	return Identity{}, errors.New("ike: the EAP-TLS certificate names no identity (empty subject, no email or DNS name)")
}

// refuse fails IKE_AUTH with AUTHENTICATION_FAILED (section 2.21.2).
func (t *eapTask) refuse(x *exchange, err error) taskStatus {
	x.sa.ep.stats.AuthFailed++
	return x.fail(AuthenticationFailed, err)
}
