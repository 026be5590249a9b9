package ike

// The CRL extensions (RFC 5280 sections 5.2 and 5.3) that crypto/x509
// leaves raw, and the certificate's CRL distribution points (4.2.1.13)
// that a scoped CRL is matched against:
//
//	deltaCRLIndicator (2.5.29.27)         the CRL is a delta of the complete
//	                                      CRLs numbered BaseCRLNumber or more
//	issuingDistributionPoint (2.5.29.28)  its scope: a distribution point,
//	                                      user or CA certificates only, some
//	                                      reasons only, an indirect CRL
//	freshestCRL (2.5.29.46)               where its deltas are (read for its
//	                                      syntax: nothing is fetched)
//	certificateIssuer (entry, 2.5.29.29)  whose the entries of an indirect
//	                                      CRL are, from this one on
//
// A CRL with a critical extension, or an entry with a critical entry
// extension, that this file does not know is refused (sections 5.2 and
// 5.3: it must not be used to decide any certificate's status).

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

var (
	oidIssuerAltName      = asn1.ObjectIdentifier{2, 5, 29, 18}
	oidCRLNumber          = asn1.ObjectIdentifier{2, 5, 29, 20}
	oidReasonCode         = asn1.ObjectIdentifier{2, 5, 29, 21}
	oidHoldInstruction    = asn1.ObjectIdentifier{2, 5, 29, 23}
	oidInvalidityDate     = asn1.ObjectIdentifier{2, 5, 29, 24}
	oidDeltaCRLIndicator  = asn1.ObjectIdentifier{2, 5, 29, 27}
	oidIssuingDP          = asn1.ObjectIdentifier{2, 5, 29, 28}
	oidCertificateIssuer  = asn1.ObjectIdentifier{2, 5, 29, 29}
	oidCRLDistPoints      = asn1.ObjectIdentifier{2, 5, 29, 31}
	oidAuthorityKeyID     = asn1.ObjectIdentifier{2, 5, 29, 35}
	oidFreshestCRL        = asn1.ObjectIdentifier{2, 5, 29, 46}
	oidAuthorityInfoAcces = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 1}
)

// reasonRemoveFromCRL is the CRLReason of an entry of a delta CRL that
// takes a certificate on hold off the list (section 5.3.1).
const reasonRemoveFromCRL = 8

// reasonFlags is a ReasonFlags bit string (section 4.2.1.13): bit r set
// for CRLReason r.
type reasonFlags uint16

// allReasons are the reasons a CRL covers without onlySomeReasons:
// keyCompromise (1) to aACompromise (8).
const allReasons reasonFlags = 0x1fe

var reasonNames = []string{1: "keyCompromise", "cACompromise", "affiliationChanged", "superseded",
	"cessationOfOperation", "certificateHold", "privilegeWithdrawn", "aACompromise"}

func (f reasonFlags) String() string {
	var names []string
	for r := 1; r < len(reasonNames); r++ {
		if f&(1<<r) != 0 {
			names = append(names, reasonNames[r])
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// crlReasonName names a CRLReason of an entry (section 5.3.1).
func crlReasonName(r int) string {
	switch {
	case r == 0:
		return "unspecified"
	case r == reasonRemoveFromCRL:
		return "removeFromCRL"
	case r > 0 && r < len(reasonNames) && r != 7:
		return reasonNames[r]
	case r == 9:
		return "privilegeWithdrawn"
	case r == 10:
		return "aACompromise"
	}
	return fmt.Sprintf("reason(%d)", r)
}

// dpName is one name of a DistributionPointName: the DER of a
// GeneralName of its fullName, or (relative) of its
// nameRelativeToCRLIssuer.
type dpName struct {
	der      string
	relative bool
}

// crlScope is a CRL's issuingDistributionPoint (section 5.2.5); the zero
// value, with reasons allReasons, is a CRL without one: every
// certificate of its issuer.
type crlScope struct {
	names                                []dpName // nil: not one distribution point's
	userOnly, caOnly, attrOnly, indirect bool
	reasons                              reasonFlags
}

// crlMeta is what crl.go needs of a CRL beyond crypto/x509's fields.
type crlMeta struct {
	// delta is set for a delta CRL (section 5.2.4): base is its
	// BaseCRLNumber.
	delta bool
	base  *big.Int
	scope crlScope
	// scopeKey is the DER of its issuingDistributionPoint ("" without
	// one): a delta applies to a complete CRL of the same scope.
	scopeKey string
}

// parseCRLMeta reads l's extensions and checks its entries'. An error
// says why l must not be used: a critical extension or critical entry
// extension not understood, a malformed one, or a delta CRL without a
// CRL number.
func parseCRLMeta(l *x509.RevocationList) (crlMeta, error) {
	m := crlMeta{scope: crlScope{reasons: allReasons}}
	for _, e := range l.Extensions {
		var err error
		switch {
		case e.Id.Equal(oidDeltaCRLIndicator):
			m.delta = true
			m.base = new(big.Int)
			s := cryptobyte.String(e.Value)
			if !s.ReadASN1Integer(m.base) || !s.Empty() || m.base.Sign() < 0 {
				err = errors.New("malformed deltaCRLIndicator")
			}
		case e.Id.Equal(oidIssuingDP):
			m.scope, err = parseIDP(e.Value)
			m.scopeKey = string(e.Value)
		case e.Id.Equal(oidFreshestCRL):
			_, err = parseDistPoints(e.Value)
		case e.Id.Equal(oidCRLNumber), e.Id.Equal(oidAuthorityKeyID), e.Id.Equal(oidIssuerAltName),
			e.Id.Equal(oidAuthorityInfoAcces):
			// crypto/x509 read the first two; the others change nothing here.
		default:
			if e.Critical {
				err = fmt.Errorf("critical extension %v not understood (RFC 5280 section 5.2)", e.Id)
			}
		}
		if err != nil {
			return crlMeta{}, err
		}
	}
	if m.delta && l.Number == nil {
		return crlMeta{}, errors.New("delta CRL without a CRL number")
	}
	for i := range l.RevokedCertificateEntries {
		r := &l.RevokedCertificateEntries[i]
		for _, e := range r.Extensions {
			switch {
			case e.Id.Equal(oidCertificateIssuer):
				if _, err := parseGeneralNames(e.Value); err != nil {
					return crlMeta{}, fmt.Errorf("entry for serial %x: malformed certificateIssuer", r.SerialNumber)
				}
			case e.Id.Equal(oidReasonCode), e.Id.Equal(oidInvalidityDate), e.Id.Equal(oidHoldInstruction):
			default:
				if e.Critical {
					return crlMeta{}, fmt.Errorf("entry for serial %x: critical entry extension %v not understood (RFC 5280 section 5.3)", r.SerialNumber, e.Id)
				}
			}
		}
	}
	return m, nil
}

// parseIDP reads an IssuingDistributionPoint (section 5.2.5; the module
// is IMPLICIT TAGS, so the booleans and the bit string carry their
// context tags, and the DistributionPointName, a CHOICE, is wrapped).
func parseIDP(der []byte) (crlScope, error) {
	sc := crlScope{reasons: allReasons}
	bad := errors.New("malformed issuingDistributionPoint")
	in := cryptobyte.String(der)
	var s cryptobyte.String
	if !in.ReadASN1(&s, cbasn1.SEQUENCE) || !in.Empty() {
		return sc, bad
	}
	var dp cryptobyte.String
	var ok bool
	if !s.ReadOptionalASN1(&dp, &ok, cbasn1.Tag(0).ContextSpecific().Constructed()) {
		return sc, bad
	}
	if ok {
		names, err := parseDPName(dp)
		if err != nil {
			return sc, bad
		}
		sc.names = names
	}
	for i, b := range []*bool{&sc.userOnly, &sc.caOnly} {
		if !readImplicitBool(&s, cbasn1.Tag(i+1).ContextSpecific(), b) {
			return sc, bad
		}
	}
	var bits cryptobyte.String
	if !s.ReadOptionalASN1(&bits, &ok, cbasn1.Tag(3).ContextSpecific()) {
		return sc, bad
	}
	if ok {
		f, valid := readReasonBits(bits)
		if !valid {
			return sc, bad
		}
		sc.reasons = f & allReasons
	}
	for i, b := range []*bool{&sc.indirect, &sc.attrOnly} {
		if !readImplicitBool(&s, cbasn1.Tag(i+4).ContextSpecific(), b) {
			return sc, bad
		}
	}
	if !s.Empty() || (sc.userOnly && sc.caOnly) {
		return sc, bad
	}
	return sc, nil
}

// readImplicitBool reads an optional [tag] IMPLICIT BOOLEAN into b.
func readImplicitBool(s *cryptobyte.String, tag cbasn1.Tag, b *bool) bool {
	var v cryptobyte.String
	var ok bool
	if !s.ReadOptionalASN1(&v, &ok, tag) {
		return false
	}
	if !ok {
		return true
	}
	if len(v) != 1 || (v[0] != 0 && v[0] != 0xff) {
		return false
	}
	*b = v[0] == 0xff
	return true
}

// readReasonBits reads the content octets of a ReasonFlags BIT STRING.
func readReasonBits(v []byte) (reasonFlags, bool) {
	if len(v) == 0 || v[0] > 7 || (len(v) == 1 && v[0] != 0) {
		return 0, false
	}
	var f reasonFlags
	for i, b := range v[1:] {
		for j := 0; j < 8; j++ {
			if bit := i*8 + j; b&(0x80>>j) != 0 && bit < 16 {
				f |= 1 << bit
			}
		}
	}
	return f, true
}

// parseDPName reads the content of a DistributionPointName's wrapper: a
// fullName [0] (GeneralNames) or a nameRelativeToCRLIssuer [1] (an RDN).
func parseDPName(dp cryptobyte.String) ([]dpName, error) {
	bad := errors.New("malformed DistributionPointName")
	var v cryptobyte.String
	var tag cbasn1.Tag
	if !dp.ReadAnyASN1Element(&v, &tag) || !dp.Empty() {
		return nil, bad
	}
	switch tag {
	case cbasn1.Tag(0).ContextSpecific().Constructed():
		var body cryptobyte.String
		if !v.ReadASN1(&body, tag) {
			return nil, bad
		}
		return generalNames(body)
	case cbasn1.Tag(1).ContextSpecific().Constructed():
		var body cryptobyte.String
		if !v.ReadASN1(&body, tag) || body.Empty() {
			return nil, bad
		}
		return []dpName{{der: string(body), relative: true}}, nil
	}
	return nil, bad
}

// generalNames splits the content of a GeneralNames into its names; it
// needs at least one (SIZE (1..MAX)).
func generalNames(body cryptobyte.String) ([]dpName, error) {
	var out []dpName
	for !body.Empty() {
		var n cryptobyte.String
		var tag cbasn1.Tag
		if !body.ReadAnyASN1Element(&n, &tag) || tag&0x80 == 0 {
			return nil, errors.New("malformed GeneralName")
		}
		out = append(out, dpName{der: string(n)})
	}
	if len(out) == 0 {
		return nil, errors.New("empty GeneralNames")
	}
	return out, nil
}

// parseGeneralNames reads a GeneralNames SEQUENCE (a certificateIssuer's
// value).
func parseGeneralNames(der []byte) ([]dpName, error) {
	in := cryptobyte.String(der)
	var body cryptobyte.String
	if !in.ReadASN1(&body, cbasn1.SEQUENCE) || !in.Empty() {
		return nil, errors.New("malformed GeneralNames")
	}
	return generalNames(body)
}

// namesDN reports whether one of names is a directoryName equal to dn.
func namesDN(names []dpName, dn []byte) bool {
	for _, n := range names {
		if n.relative {
			continue
		}
		s := cryptobyte.String(n.der)
		var name cryptobyte.String
		if s.ReadASN1(&s, cbasn1.Tag(4).ContextSpecific().Constructed()) &&
			s.ReadASN1Element(&name, cbasn1.SEQUENCE) && DNEqual(name, dn) {
			return true
		}
	}
	return false
}

// distPoint is one DistributionPoint of a certificate's
// cRLDistributionPoints or a CRL's freshestCRL (section 4.2.1.13).
type distPoint struct {
	names   []dpName    // nil: no distributionPoint
	reasons reasonFlags // allReasons when absent
	issuer  []dpName    // cRLIssuer
}

// parseDistPoints reads a CRLDistributionPoints (or FreshestCRL) value.
func parseDistPoints(der []byte) ([]distPoint, error) {
	bad := errors.New("malformed CRL distribution points")
	in := cryptobyte.String(der)
	var seq cryptobyte.String
	if !in.ReadASN1(&seq, cbasn1.SEQUENCE) || !in.Empty() || seq.Empty() {
		return nil, bad
	}
	var out []distPoint
	for !seq.Empty() {
		var d cryptobyte.String
		if !seq.ReadASN1(&d, cbasn1.SEQUENCE) {
			return nil, bad
		}
		p := distPoint{reasons: allReasons}
		var v cryptobyte.String
		var ok bool
		if !d.ReadOptionalASN1(&v, &ok, cbasn1.Tag(0).ContextSpecific().Constructed()) {
			return nil, bad
		}
		if ok {
			names, err := parseDPName(v)
			if err != nil {
				return nil, bad
			}
			p.names = names
		}
		if !d.ReadOptionalASN1(&v, &ok, cbasn1.Tag(1).ContextSpecific()) {
			return nil, bad
		}
		if ok {
			f, valid := readReasonBits(v)
			if !valid {
				return nil, bad
			}
			p.reasons = f & allReasons
		}
		if !d.ReadOptionalASN1(&v, &ok, cbasn1.Tag(2).ContextSpecific().Constructed()) {
			return nil, bad
		}
		if ok {
			names, err := generalNames(v)
			if err != nil {
				return nil, bad
			}
			p.issuer = names
		}
		if !d.Empty() || (p.names == nil && p.issuer == nil) {
			return nil, bad
		}
		out = append(out, p)
	}
	return out, nil
}

// certDistPoints returns cert's cRLDistributionPoints; ok is false when
// it has none or the extension is malformed.
func certDistPoints(cert *x509.Certificate) (dps []distPoint, ok bool) {
	for _, e := range cert.Extensions {
		if e.Id.Equal(oidCRLDistPoints) {
			dps, err := parseDistPoints(e.Value)
			return dps, err == nil
		}
	}
	return nil, false
}

// covers returns the reasons for which a CRL of scope sc, issued by
// cert's issuer, gives cert's status (RFC 5280 section 6.3.3 (b)(2) and
// (d)); 0 when its scope leaves cert out. why says why when it does.
func (sc *crlScope) covers(cert *x509.Certificate) (r reasonFlags, why string) {
	isCA := cert.BasicConstraintsValid && cert.IsCA
	switch {
	case sc.attrOnly:
		return 0, "covers attribute certificates only"
	case sc.userOnly && isCA:
		return 0, "covers end-entity certificates only"
	case sc.caOnly && !isCA:
		return 0, "covers CA certificates only"
	}
	if sc.names == nil {
		return sc.reasons, ""
	}
	dps, ok := certDistPoints(cert)
	if !ok {
		// Without cRLDistributionPoints the certificate's one point is
		// its issuer (6.3.3): the CRL's must name it.
		if namesDN(sc.names, cert.RawIssuer) {
			return sc.reasons, ""
		}
		return 0, "is for a distribution point the certificate does not name"
	}
	for _, d := range dps {
		if namesMeet(sc.names, d.names) {
			r |= sc.reasons & d.reasons
		}
	}
	if r == 0 {
		return 0, "is for a distribution point the certificate does not name"
	}
	return r, ""
}

// namesMeet reports whether a and b share a name (the same DER).
func namesMeet(a, b []dpName) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// entryIssuers follows the certificateIssuer entry extensions of an
// indirect CRL (section 5.3.3): each one says whose the entries are
// from it on; before the first, the CRL issuer's.
type entryIssuers struct {
	mine bool // the current entries are the certificate issuer's
}

// next returns whether r belongs to the issuer dn, updating the state
// from r's certificateIssuer.
func (s *entryIssuers) next(r *x509.RevocationListEntry, dn []byte) bool {
	if e := findExt(r.Extensions, oidCertificateIssuer); e != nil {
		names, err := parseGeneralNames(e.Value)
		s.mine = err == nil && namesDN(names, dn)
	}
	return s.mine
}

func findExt(exts []pkix.Extension, id asn1.ObjectIdentifier) *pkix.Extension {
	for i := range exts {
		if exts[i].Id.Equal(id) {
			return &exts[i]
		}
	}
	return nil
}
