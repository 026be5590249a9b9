package ike

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
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
// certificate of the chain), current (thisUpdate not in the future,
// nextUpdate, when given, not passed), and with no critical extension
// that crlext.go does not understand. The CRLs of an issuer are read by
// scope (issuingDistributionPoint): in each, the newest complete CRL
// decides (the highest CRL number, else the latest thisUpdate), merged
// with the newest delta CRL that applies to it (section 5.2.4: base and
// delta share one number sequence, so the highest number alone is not
// the answer); certStatus says how. Every certificate of the chain but
// the trust anchor is checked. Nothing is fetched: distribution points
// are not followed.

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
// CRL. It checks their syntax, and refuses a CRL that must not be used
// (RFC 5280 sections 5.2 and 5.3): one with a critical extension or
// critical entry extension not understood, a malformed scope or delta
// indicator, a delta CRL without a number. Whose they are and whether
// they are current is decided when a chain is checked.
func ParseCRLs(data []byte) ([]*x509.RevocationList, error) {
	if !strings.Contains(string(data[:min(len(data), 4096)]), "-----BEGIN") {
		l, err := x509.ParseRevocationList(data)
		if err == nil {
			_, err = parseCRLMeta(l)
		}
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
		if err == nil {
			_, err = parseCRLMeta(l)
		}
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
// that is revoked, or whose status is unknown under RevocationStrict
// (with what the CRLs of its issuer lacked).
func checkRevocation(chain []*x509.Certificate, crls []*x509.RevocationList, policy Revocation, now time.Time) error {
	for i := 0; i+1 < len(chain); i++ {
		cert, issuer := chain[i], chain[i+1]
		st := certStatus(cert, issuer, crls, now)
		if st.revoked != nil {
			r := st.revoked
			return fmt.Errorf("ike: certificate %q (serial %x) is revoked since %s, reason %s (%s of %q)",
				cert.Subject.String(), cert.SerialNumber, r.RevocationTime.UTC().Format(time.RFC3339),
				crlReasonName(r.ReasonCode), crlName(st.by), issuer.Subject.String())
		}
		if st.covered != allReasons && policy == RevocationStrict {
			msg := fmt.Sprintf("ike: certificate %q: no valid CRL of its issuer %q (revocation strict)",
				cert.Subject.String(), issuer.Subject.String())
			if st.covered != 0 {
				st.notes = append(st.notes, "reasons "+(allReasons&^st.covered).String()+" are covered by none")
			}
			if len(st.notes) > 0 {
				msg += ": " + strings.Join(st.notes, "; ")
			}
			return errors.New(msg)
		}
	}
	return nil
}

// revStatus is what the CRLs of a certificate's issuer say of it.
type revStatus struct {
	// revoked is the entry that revokes it, in the CRL by; nil when none
	// does.
	revoked *x509.RevocationListEntry
	by      *x509.RevocationList
	// covered are the reasons for which a complete CRL (or a complete
	// CRL and its delta) whose scope covers it says it is not revoked;
	// allReasons is a known status.
	covered reasonFlags
	// notes say why a CRL of its issuer did not count.
	notes []string
}

// certStatus reads cert's status in crls, its issuer's being issuer, at
// now (RFC 5280 sections 5.2.4, 5.2.5 and 6.3.3). A CRL counts when it is
// valid: issued under cert's issuer name, signed by issuer, not from the
// future, and with no critical extension not understood. The CRLs of one
// scope (the same issuingDistributionPoint, or none) are read together:
// the newest current complete CRL, or, better, the newest current delta
// CRL d with the newest complete CRL b (current or not) such that d's
// number > b's number >= d's BaseCRLNumber (when no current complete CRL
// is newer than d), merged: an entry of d
// replaces b's, and one of reason removeFromCRL takes the certificate off
// (a hold released). A delta without such a base vouches for nothing,
// but a revocation it lists still counts, as does one that any valid CRL
// of the issuer lists (serial numbers are unique per issuer), whatever
// its scope. A scope that does not cover cert (issuingDistributionPoint's
// distribution point, onlyContainsUserCerts, onlyContainsCACerts,
// onlyContainsAttributeCerts) vouches for nothing, and onlySomeReasons
// for those reasons only.
func certStatus(cert, issuer *x509.Certificate, crls []*x509.RevocationList, now time.Time) revStatus {
	var st revStatus
	type group struct {
		meta   crlMeta
		bases  []*x509.RevocationList
		deltas []deltaCRL
	}
	var groups []*group
	for _, l := range crls {
		if !DNEqual(l.RawIssuer, cert.RawIssuer) || now.Before(l.ThisUpdate) || l.CheckSignatureFrom(issuer) != nil {
			continue
		}
		m, err := parseCRLMeta(l)
		if err != nil {
			st.notes = append(st.notes, crlName(l)+" refused: "+err.Error())
			continue
		}
		current := l.NextUpdate.IsZero() || now.Before(l.NextUpdate)
		if m.delta && !current {
			continue // an expired delta says nothing
		}
		var g *group
		for _, h := range groups {
			if h.meta.scopeKey == m.scopeKey {
				g = h
			}
		}
		if g == nil {
			g = &group{meta: m}
			groups = append(groups, g)
		}
		if m.delta {
			g.deltas = append(g.deltas, deltaCRL{l, m.base})
		} else if current || l.Number != nil {
			// An expired complete CRL may still be a delta's base.
			g.bases = append(g.bases, l)
		}
	}
	serial := cert.SerialNumber
	revokes := func(l *x509.RevocationList, e *x509.RevocationListEntry) {
		if st.revoked == nil && e != nil && e.ReasonCode != reasonRemoveFromCRL {
			st.revoked, st.by = e, l
		}
	}
	for _, g := range groups {
		delta, base := pairDelta(g.deltas, g.bases)
		cur := newestCurrent(g.bases, now)
		if delta != nil && cur != nil && !newerCRL(delta, cur) {
			delta, base = nil, nil // a complete CRL newer than the delta holds it
		}
		switch {
		case delta != nil:
			if e := crlEntry(delta, cert.RawIssuer, serial); e != nil {
				revokes(delta, e)
			} else {
				revokes(base, crlEntry(base, cert.RawIssuer, serial))
			}
		case cur != nil:
			revokes(cur, crlEntry(cur, cert.RawIssuer, serial))
		}
		// The newest delta, if newer than what decided, still revokes.
		if dd := newestDelta(g.deltas); dd.l != nil && dd.l != delta && (cur == nil || newerCRL(dd.l, cur)) && (delta == nil || newerCRL(dd.l, delta)) {
			d := dd.l
			revokes(d, crlEntry(d, cert.RawIssuer, serial))
			if delta == nil && cur == nil {
				st.notes = append(st.notes, fmt.Sprintf("%s has no base (a complete CRL numbered %v to %v)", crlName(d), dd.base, new(big.Int).Sub(d.Number, big.NewInt(1))))
			}
		}
		if delta == nil && cur == nil {
			continue
		}
		r, why := g.meta.scope.covers(cert)
		if r == 0 {
			l := cur
			if delta != nil {
				l = delta
			}
			st.notes = append(st.notes, crlName(l)+" "+why)
		}
		st.covered |= r
	}
	return st
}

// deltaCRL is a current delta CRL and its BaseCRLNumber.
type deltaCRL struct {
	l    *x509.RevocationList
	base *big.Int
}

// pairDelta returns the newest of deltas that has a base among bases,
// with the newest such base: d's number > b's number >= d's
// BaseCRLNumber (section 5.2.4); nil, nil when none has.
func pairDelta(deltas []deltaCRL, bases []*x509.RevocationList) (d, b *x509.RevocationList) {
	for _, dl := range deltas {
		if d != nil && !newerCRL(dl.l, d) {
			continue
		}
		var best *x509.RevocationList
		for _, c := range bases {
			if c.Number != nil && c.Number.Cmp(dl.l.Number) < 0 && c.Number.Cmp(dl.base) >= 0 && (best == nil || newerCRL(c, best)) {
				best = c
			}
		}
		if best != nil {
			d, b = dl.l, best
		}
	}
	return d, b
}

// newestDelta returns the newest of ds (newerCRL); the zero deltaCRL
// when there is none.
func newestDelta(ds []deltaCRL) deltaCRL {
	var best deltaCRL
	for _, d := range ds {
		if best.l == nil || newerCRL(d.l, best.l) {
			best = d
		}
	}
	return best
}

// newestCurrent returns the newest of ls whose nextUpdate, when given,
// has not passed at now.
func newestCurrent(ls []*x509.RevocationList, now time.Time) *x509.RevocationList {
	var best *x509.RevocationList
	for _, l := range ls {
		if (l.NextUpdate.IsZero() || now.Before(l.NextUpdate)) && (best == nil || newerCRL(l, best)) {
			best = l
		}
	}
	return best
}

// crlEntry returns l's entry for the certificate of serial issued by
// issuer (a DN's DER); nil when it has none. In an indirect CRL the
// certificateIssuer entry extensions say whose each entry is (section
// 5.3.3); a CRL that is not indirect carries none.
func crlEntry(l *x509.RevocationList, issuer []byte, serial *big.Int) *x509.RevocationListEntry {
	who := entryIssuers{mine: true}
	for i := range l.RevokedCertificateEntries {
		r := &l.RevokedCertificateEntries[i]
		if who.next(r, issuer) && r.SerialNumber != nil && r.SerialNumber.Cmp(serial) == 0 {
			return r
		}
	}
	return nil
}

// crlName names l in an error: "CRL 12" or "delta CRL 13", by its number
// (its thisUpdate without one).
func crlName(l *x509.RevocationList) string {
	kind := "CRL"
	if findExt(l.Extensions, oidDeltaCRLIndicator) != nil {
		kind = "delta CRL"
	}
	if l.Number != nil {
		return fmt.Sprintf("%s %v", kind, l.Number)
	}
	return fmt.Sprintf("%s of %s", kind, l.ThisUpdate.UTC().Format(time.RFC3339))
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

// checkCRLs refuses p's CRLs that must not be used (parseCRLMeta: RFC
// 5280 sections 5.2 and 5.3), as ParseCRLs does, so that a list given
// to the Peer directly is refused when the peer is, not ignored at each
// authentication.
func (p *Peer) checkCRLs() error {
	for i, l := range p.CRLs {
		if l == nil {
			return fmt.Errorf("ike: peer %q: CRL %d is nil", p.Name, i+1)
		}
		if _, err := parseCRLMeta(l); err != nil {
			return fmt.Errorf("ike: peer %q: CRL %d (%s of %q): %w", p.Name, i+1, crlName(l), dnString(l.RawIssuer), err)
		}
	}
	return nil
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
