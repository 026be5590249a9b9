package gateway

// EAP (RFC 7296 section 2.16) for connections whose [connection.remote]
// auth is an EAP method: sluice is the EAP server. eapPeer turns the
// connection's remote auth, eap_id, cacerts/certs and the type = "eap"
// secrets into ike.Peer.EAP.

import (
	"crypto"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/ike/eap"
)

// eapPeer sets p.EAP for connection i when its remote side authenticates
// with EAP, and leaves p alone otherwise. p's own certificates must be
// set (EAP-TLS serves them); its Signer may come later (ikePeer sets it):
// the TLS server signs through whatever p.Signer is at handshake time.
func eapPeer(cfg *config.Gateway, i int, p *ike.Peer) error {
	c := &cfg.Connections[i]
	ra := &c.RemoteAuth
	if !config.IsEAP(ra.Auth) {
		return nil
	}
	cf := config.ConnectionField(i)
	// The passwords of the type = "eap" secrets, copied: the session
	// reads them while the configuration may be reloaded.
	passwords := map[string][]byte{}
	for k := range cfg.Secrets {
		if s := &cfg.Secrets[k]; s.Type == config.SecretEAP {
			for _, id := range s.IDs {
				if _, ok := passwords[id]; !ok {
					passwords[id] = slices.Clone(s.Data)
				}
			}
		}
	}
	cas, err := remoteCAs(cfg, i)
	if err != nil {
		return err
	}
	mschap := ra.Auth == config.AuthEAPMSCHAPv2 || ra.Auth == config.AuthEAP && len(passwords) > 0
	tlsOn := ra.Auth == config.AuthEAPTLS || ra.Auth == config.AuthEAP && len(cas) > 0
	e := &eap.Config{}
	if ra.EAPID != config.EAPIdentityAny {
		e.Identity = ra.EAPID
	}
	if mschap {
		e.Methods = append(e.Methods, eap.TypeMSCHAPv2)
		e.Password = func(id string) ([]byte, bool) {
			pw, ok := passwords[id]
			return pw, ok
		}
	}
	if tlsOn {
		field := cf + ".local.certs"
		if len(p.Certificates) == 0 {
			return fmt.Errorf("%s: %s: EAP-TLS needs our certificate (auth = \"pubkey\" with certs)", cfg.FieldPos(field), field)
		}
		if len(cas) == 0 {
			field := cf + ".remote.cacerts"
			return fmt.Errorf("%s: %s: EAP-TLS needs the CAs of the peers' certificates", cfg.FieldPos(field), field)
		}
		pool := x509.NewCertPool()
		for _, ca := range cas {
			pool.AddCert(ca)
		}
		chain := make([][]byte, len(p.Certificates))
		for j, cert := range p.Certificates {
			chain[j] = cert.Raw
		}
		e.Methods = append(e.Methods, eap.TypeTLS)
		e.TLS = &tls.Config{
			Certificates: []tls.Certificate{{Certificate: chain, Leaf: p.Certificates[0],
				PrivateKey: peerSigner{p: p, pub: p.Certificates[0].PublicKey}}},
			ClientCAs: pool,
		}
	}
	e.Fingerprint = eapFingerprint(e, passwords, cas)
	if len(e.Methods) == 0 {
		field := cf + ".remote.auth"
		return fmt.Errorf("%s: %s: auth = \"eap\" offers no method: no type = \"eap\" secret (EAP-MSCHAPv2) and no cacerts (EAP-TLS)", cfg.FieldPos(field), field)
	}
	p.EAP = e
	return nil
}

// eapFingerprint digests what authenticates EAP peers: the methods, the
// identity, the passwords (EAP-MSCHAPv2) and the CAs (EAP-TLS; our
// certificates are the peer's, which sameCredentials compares already).
func eapFingerprint(e *eap.Config, passwords map[string][]byte, cas []*x509.Certificate) string {
	h := sha256.New()
	put := func(b []byte) {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
		h.Write(b)
	}
	for _, m := range e.Methods {
		put([]byte{byte(m)})
	}
	put([]byte(e.Identity))
	if e.Password != nil {
		for _, id := range slices.Sorted(maps.Keys(passwords)) {
			put([]byte(id))
			put(passwords[id])
		}
	}
	if e.TLS != nil {
		for _, ca := range cas {
			put(ca.Raw)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sameEAP reports whether two peers' EAP configurations authenticate
// alike (reload keeps a peer only then).
func sameEAP(a, b *ike.Peer) bool {
	if a.EAP == nil || b.EAP == nil {
		return a.EAP == b.EAP
	}
	return a.EAP.Fingerprint == b.EAP.Fingerprint
}

// peerSigner signs for the EAP-TLS server with the peer's Signer, which
// ikePeer sets after the peer is built (the key lives in an engine).
type peerSigner struct {
	p   *ike.Peer
	pub crypto.PublicKey
}

func (s peerSigner) Public() crypto.PublicKey { return s.pub }

func (s peerSigner) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	if s.p.Signer == nil {
		return nil, errors.New("gateway: EAP-TLS: no private key for our certificate")
	}
	return s.p.Signer.Sign(r, digest, opts)
}
