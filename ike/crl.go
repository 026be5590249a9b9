package ike

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// CRL checks of a peer's certificate chain (RFC 5280 sections 5 and 6.3),
// with swanctl's revocation policies. Peer.CRLs are the revocation lists
// known; verifyPeerCert (auth.go) calls checkRevocation with the chain it
// verified. A CRL counts for a certificate when it is valid: issued under
// the certificate's issuer name, signed by the issuer's key (the next
// certificate of the chain), and current (thisUpdate not in the future,
// nextUpdate, when given, not passed). Of several valid CRLs of one issuer
// the newest decides (the highest CRL number, else the latest
// thisUpdate). Every certificate of the chain but the trust anchor is
// checked. Nothing is fetched: distribution points are not followed.

// Revocation is a revocation policy: what a certificate without a known
// status meets (swanctl's remote revocation).
type Revocation uint8

const (
	// RevocationRelaxed fails only a certificate that a valid CRL of its
	// issuer lists; without one (none configured, or only expired or
	// badly signed ones) its status is unknown and it passes. swanctl's
	// default.
	RevocationRelaxed Revocation = iota
	// RevocationStrict fails a certificate that is revoked and one whose
	// status is unknown: no valid CRL of its issuer is known.
	RevocationStrict
)

// ParseRevocation reads a policy by swanctl's name: "relaxed" or
// "strict" ("" is relaxed).
func ParseRevocation(s string) (Revocation, error) {
	switch s {
	case "", "relaxed":
		return RevocationRelaxed, nil
	case "strict":
		return RevocationStrict, nil
	}
	return 0, fmt.Errorf("ike: revocation %q: want relaxed or strict", s)
}

// String returns swanctl's name of the policy.
func (r Revocation) String() string {
	switch r {
	case RevocationRelaxed:
		return "relaxed"
	case RevocationStrict:
		return "strict"
	}
	return fmt.Sprintf("revocation(%d)", uint8(r))
}

// ParseCRLs reads certificate revocation lists from data: one or more
// PEM blocks of type "X509 CRL" (other blocks are skipped), or one DER
// CRL. It checks their syntax only; whose they are and whether they are
// current is decided when a chain is checked.
func ParseCRLs(data []byte) ([]*x509.RevocationList, error) {
	if !strings.Contains(string(data[:min(len(data), 4096)]), "-----BEGIN") {
		l, err := x509.ParseRevocationList(data)
		if err != nil {
			return nil, fmt.Errorf("ike: CRL: %w", err)
		}
		return []*x509.RevocationList{l}, nil
	}
	var out []*x509.RevocationList
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "X509 CRL" {
			continue
		}
		l, err := x509.ParseRevocationList(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("ike: CRL %d: %w", len(out)+1, err)
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, errors.New("ike: CRL: no X509 CRL block in the PEM data")
	}
	return out, nil
}

// checkRevocation checks each certificate of chain (the peer's first, the
// trust anchor last, as x509.Certificate.Verify returns it) but the
// anchor against crls under policy: an error names the first certificate
// that is revoked, or whose status is unknown under RevocationStrict.
func checkRevocation(chain []*x509.Certificate, crls []*x509.RevocationList, policy Revocation, now time.Time) error {
	for i := 0; i+1 < len(chain); i++ {
		cert, issuer := chain[i], chain[i+1]
		crl := currentCRL(cert, issuer, crls, now)
		if crl == nil {
			if policy == RevocationStrict {
				return fmt.Errorf("ike: certificate %q: no valid CRL of its issuer %q (revocation strict)",
					cert.Subject.String(), issuer.Subject.String())
			}
			continue
		}
		for _, r := range crl.RevokedCertificateEntries {
			if r.SerialNumber != nil && r.SerialNumber.Cmp(cert.SerialNumber) == 0 {
				return fmt.Errorf("ike: certificate %q (serial %x) is revoked since %s (CRL of %q)",
					cert.Subject.String(), cert.SerialNumber, r.RevocationTime.UTC().Format(time.RFC3339), issuer.Subject.String())
			}
		}
	}
	return nil
}

// currentCRL returns the newest of crls that is valid for cert, issued by
// issuer, at now; nil when there is none.
func currentCRL(cert, issuer *x509.Certificate, crls []*x509.RevocationList, now time.Time) *x509.RevocationList {
	var best *x509.RevocationList
	for _, l := range crls {
		if !DNEqual(l.RawIssuer, cert.RawIssuer) || now.Before(l.ThisUpdate) ||
			(!l.NextUpdate.IsZero() && !now.Before(l.NextUpdate)) {
			continue
		}
		if l.CheckSignatureFrom(issuer) != nil {
			continue
		}
		if best == nil || newerCRL(l, best) {
			best = l
		}
	}
	return best
}

// newerCRL reports whether a supersedes b: a higher CRL number (RFC 5280
// section 5.2.3) when both have one, else a later thisUpdate.
func newerCRL(a, b *x509.RevocationList) bool {
	if a.Number != nil && b.Number != nil && a.Number.Cmp(b.Number) != 0 {
		return a.Number.Cmp(b.Number) > 0
	}
	return a.ThisUpdate.After(b.ThisUpdate)
}

// checkChains checks the chains x509.Certificate.Verify built for the
// peer's certificate against p.CRLs under p.Revocation at now: one chain
// that passes is enough (a cross-signed certificate may have several);
// otherwise the first chain's failure is returned.
func (p *Peer) checkChains(chains [][]*x509.Certificate, now time.Time) error {
	if len(p.CRLs) == 0 && p.Revocation == RevocationRelaxed {
		return nil
	}
	var first error
	for _, c := range chains {
		err := checkRevocation(c, p.CRLs, p.Revocation, now)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// RotatesCRLs reports whether p differs from old, a peer of the same name,
// only in its revocation lists or policy (a reloaded CRL file). SetPeers
// then hands old's SAs to p, as for a new pre-shared key (RotatesPSK):
// the lists apply to the next authentication with the peer (a new IKE SA,
// or a reauthentication), not to the SAs that stand. strongSwan does the
// same: it checks revocation when it authenticates a peer, and a CRL it
// learns later does not end an IKE SA already up.
func (p *Peer) RotatesCRLs(old *Peer) bool {
	if p.Name != old.Name || (p.Revocation == old.Revocation && slices.EqualFunc(p.CRLs, old.CRLs, sameCRL)) {
		return false
	}
	a, b := *old, *p
	a.CRLs, b.CRLs = nil, nil
	a.Revocation, b.Revocation = 0, 0
	return reflect.DeepEqual(a, b)
}

// sameCRL reports whether two lists are the same encoded list.
func sameCRL(a, b *x509.RevocationList) bool {
	return a == b || (a != nil && b != nil && bytes.Equal(a.Raw, b.Raw))
}
