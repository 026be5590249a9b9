package ike

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// crlEnt is one entry of a test CRL: a certificate and a CRLReason
// (0: none given), and the entry extensions to add.
type crlEnt struct {
	cert   *x509.Certificate
	reason int
	exts   []pkix.Extension
}

// crlSpec is a test CRL: its number, validity, entries and extensions.
type crlSpec struct {
	number     int64
	this, next time.Time
	ents       []crlEnt
	exts       []pkix.Extension
}

// make signs spec with ca, as crypto/x509 makes CRLs, and parses it
// back without ParseCRLs' checks (checkRevocation must refuse what they
// would, on its own).
func (ca *crlCA) make(t *testing.T, spec crlSpec) *x509.RevocationList {
	t.Helper()
	tmpl := &x509.RevocationList{Number: big.NewInt(spec.number), ThisUpdate: spec.this, NextUpdate: spec.next, ExtraExtensions: spec.exts}
	for _, e := range spec.ents {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{
			SerialNumber: e.cert.SerialNumber, RevocationTime: spec.this.Add(-time.Minute), ReasonCode: e.reason, ExtraExtensions: e.exts})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca.cert, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := x509.ParseRevocationList(der)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// deltaInd is a deltaCRLIndicator naming base (critical, as section
// 5.2.4 has it).
func deltaInd(t *testing.T, base int64) pkix.Extension {
	v, err := asn1.Marshal(big.NewInt(base))
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: oidDeltaCRLIndicator, Critical: true, Value: v}
}

// idpSpec is an issuingDistributionPoint of a test.
type idpSpec struct {
	uris                                 []string // fullName URIs
	dirName                              []byte   // a fullName directoryName
	userOnly, caOnly, indirect, attrOnly bool
	reasons                              reasonFlags // 0: all
}

// idpExt encodes s (section 5.2.5, IMPLICIT TAGS), critical.
func idpExt(s idpSpec) pkix.Extension {
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		if len(s.uris) > 0 || s.dirName != nil {
			b.AddASN1(cbasn1.Tag(0).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) {
				b.AddASN1(cbasn1.Tag(0).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) {
					for _, u := range s.uris {
						b.AddASN1(cbasn1.Tag(6).ContextSpecific(), func(b *cryptobyte.Builder) { b.AddBytes([]byte(u)) })
					}
					if s.dirName != nil {
						b.AddASN1(cbasn1.Tag(4).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) { b.AddBytes(s.dirName) })
					}
				})
			})
		}
		for i, v := range []bool{s.userOnly, s.caOnly} {
			if v {
				b.AddASN1(cbasn1.Tag(i+1).ContextSpecific(), func(b *cryptobyte.Builder) { b.AddUint8(0xff) })
			}
		}
		if s.reasons != 0 {
			// ReasonFlags: bit r from the first octet's high bit; bits 9
			// to 15 unused.
			var v [2]byte
			for r := 0; r < 16; r++ {
				if s.reasons&(1<<r) != 0 {
					v[r/8] |= 0x80 >> (r % 8)
				}
			}
			b.AddASN1(cbasn1.Tag(3).ContextSpecific(), func(b *cryptobyte.Builder) { b.AddBytes([]byte{7, v[0], v[1]}) })
		}
		for i, v := range []bool{s.indirect, s.attrOnly} {
			if v {
				b.AddASN1(cbasn1.Tag(i+4).ContextSpecific(), func(b *cryptobyte.Builder) { b.AddUint8(0xff) })
			}
		}
	})
	return pkix.Extension{Id: oidIssuingDP, Critical: true, Value: b.BytesOrPanic()}
}

// certIssuerExt is a certificateIssuer entry extension naming dn
// (section 5.3.3, critical).
func certIssuerExt(dn []byte) pkix.Extension {
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1(cbasn1.Tag(4).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) { b.AddBytes(dn) })
	})
	return pkix.Extension{Id: oidCertificateIssuer, Critical: true, Value: b.BytesOrPanic()}
}

// adcsExts are a freshestCRL naming uri (section 5.2.6), and the
// Microsoft CA Version and Next CRL Publish extensions of an AD CS CRL
// (non-critical).
func adcsExts(uri string) []pkix.Extension {
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
			b.AddASN1(cbasn1.Tag(0).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) {
				b.AddASN1(cbasn1.Tag(0).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) {
					b.AddASN1(cbasn1.Tag(6).ContextSpecific(), func(b *cryptobyte.Builder) { b.AddBytes([]byte(uri)) })
				})
			})
		})
	})
	return []pkix.Extension{
		{Id: oidFreshestCRL, Value: b.BytesOrPanic()},
		{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 21, 1}, Value: []byte{2, 1, 0}},
		{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 21, 4}, Value: []byte{0x17, 0x0d, '2', '6', '0', '1', '0', '1', '0', '0', '0', '0', '0', '0', 'Z'}},
	}
}

// leafWithDP makes an end-entity certificate of ca named cn whose
// cRLDistributionPoints name uris (none: no extension).
func leafWithDP(t testing.TB, ca *crlCA, cn string, uris ...string) *x509.Certificate {
	t.Helper()
	return newCRLCert(t, ca, cn, false, uris...).cert
}

// TestDeltaCRL checks certificates against an AD CS-style base CRL and
// its delta (RFC 5280 section 5.2.4: one number sequence; the delta
// names its base with deltaCRLIndicator; removeFromCRL takes a
// certificate on hold off): the delta adds to its base, never replaces
// it, and alone vouches for nothing.
func TestDeltaCRL(t *testing.T) {
	const dp = "http://pki.example.net/CertEnroll/issuing.crl"
	ca := newCRLCert(t, nil, "AD CS issuing CA", true)
	inBase := leafWithDP(t, ca, "base.example.net", dp)
	inDelta := leafWithDP(t, ca, "delta.example.net", dp)
	onHold := leafWithDP(t, ca, "hold.example.net", dp)
	good := leafWithDP(t, ca, "good.example.net", dp)
	now := time.Now().Truncate(time.Second)
	past, future := now.Add(-time.Hour), now.Add(time.Hour)
	scope := idpExt(idpSpec{uris: []string{dp}})
	base := func(n int64, this, next time.Time, ents ...crlEnt) *x509.RevocationList {
		return ca.make(t, crlSpec{number: n, this: this, next: next, ents: ents, exts: append(adcsExts(dp), scope)})
	}
	delta := func(n, b int64, ents ...crlEnt) *x509.RevocationList {
		return ca.make(t, crlSpec{number: n, this: past, next: future, ents: ents, exts: []pkix.Extension{deltaInd(t, b), scope}})
	}
	base10 := base(10, past, future, crlEnt{cert: inBase, reason: 1}, crlEnt{cert: onHold, reason: 6})
	delta11 := delta(11, 10, crlEnt{cert: inDelta, reason: 1}, crlEnt{cert: onHold, reason: reasonRemoveFromCRL})
	type check struct {
		cert *x509.Certificate
		want string // a part of the error; "" passes
	}
	for _, c := range []struct {
		name   string
		crls   []*x509.RevocationList
		policy Revocation
		checks []check
	}{
		{"base-and-delta", []*x509.RevocationList{base10, delta11}, RevocationStrict, []check{
			{inBase, "is revoked since"}, {inDelta, "reason keyCompromise (delta CRL 11"}, {onHold, ""}, {good, ""}}},
		// The order they are given in changes nothing.
		{"delta-first", []*x509.RevocationList{delta11, base10}, RevocationStrict, []check{
			{inBase, "(CRL 10 of"}, {inDelta, "is revoked"}, {onHold, ""}, {good, ""}}},
		{"base-alone", []*x509.RevocationList{base10}, RevocationStrict, []check{
			{inBase, "is revoked"}, {inDelta, ""}, {onHold, "reason certificateHold"}, {good, ""}}},
		// A delta without its base: what it revokes is revoked, the rest
		// unknown.
		{"delta-alone-strict", []*x509.RevocationList{delta11}, RevocationStrict, []check{
			{inBase, "delta CRL 11 has no base (a complete CRL numbered 10 to 10)"}, {inDelta, "is revoked"}, {good, "(revocation strict)"}}},
		{"delta-alone-relaxed", []*x509.RevocationList{delta11}, RevocationRelaxed, []check{
			{inBase, ""}, {inDelta, "is revoked"}, {good, ""}}},
		// A base older than the delta's BaseCRLNumber: the delta cannot
		// complete it (its removeFromCRL does not apply), but what it
		// revokes counts; the base decides the rest.
		{"base-too-old", []*x509.RevocationList{base(8, past, future, crlEnt{cert: onHold, reason: 6}), delta(12, 10, crlEnt{cert: inDelta}, crlEnt{cert: onHold, reason: reasonRemoveFromCRL})}, RevocationStrict, []check{
			{inDelta, "is revoked"}, {onHold, "reason certificateHold (CRL 8"}, {good, ""}}},
		// A delta older than the base is in it already.
		{"delta-older-than-base", []*x509.RevocationList{base(12, past, future), delta11}, RevocationStrict, []check{
			{inDelta, ""}, {inBase, ""}, {good, ""}}},
		// A complete CRL newer than a base and its delta decides: the
		// hold that delta 11 released is back in CRL 12.
		{"base-newer-than-pair", []*x509.RevocationList{base10, delta11, base(12, past, future, crlEnt{cert: onHold, reason: 6})}, RevocationStrict, []check{
			{onHold, "reason certificateHold (CRL 12"}, {inDelta, ""}, {good, ""}}},
		// The newest delta that has a base wins over an older one.
		{"two-deltas", []*x509.RevocationList{base10, delta11, delta(13, 10, crlEnt{cert: inDelta, reason: 1}, crlEnt{cert: onHold, reason: reasonRemoveFromCRL}, crlEnt{cert: good, reason: 4})}, RevocationStrict, []check{
			{good, "reason superseded (delta CRL 13"}, {inBase, "(CRL 10"}, {onHold, ""}}},
		// An expired base still completes a current delta (section
		// 6.3.3 (a)), and alone it is no status.
		{"expired-base", []*x509.RevocationList{base(10, now.Add(-3*time.Hour), past, crlEnt{cert: inBase, reason: 1}), delta11}, RevocationStrict, []check{
			{inBase, "is revoked"}, {inDelta, "is revoked"}, {good, ""}}},
		{"expired-base-alone", []*x509.RevocationList{base(10, now.Add(-3*time.Hour), past, crlEnt{cert: inBase, reason: 1})}, RevocationStrict, []check{
			{good, "no valid CRL"}}},
		// An expired delta says nothing, and a delta of another scope
		// completes no base of this one.
		{"expired-delta", []*x509.RevocationList{base10, ca.make(t, crlSpec{number: 11, this: now.Add(-3 * time.Hour), next: past, ents: []crlEnt{{cert: inDelta}}, exts: []pkix.Extension{deltaInd(t, 10), scope}})}, RevocationStrict, []check{
			{inDelta, ""}, {good, ""}}},
		{"delta-other-scope", []*x509.RevocationList{ca.make(t, crlSpec{number: 10, this: past, next: future}), delta11}, RevocationStrict, []check{
			{inDelta, "is revoked"}, {good, ""}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range c.checks {
				err := checkRevocation([]*x509.Certificate{k.cert, ca.cert}, c.crls, c.policy, now)
				switch {
				case k.want == "" && err != nil:
					t.Errorf("%s: %v", k.cert.Subject.CommonName, err)
				case k.want != "" && (err == nil || !strings.Contains(err.Error(), k.want)):
					t.Errorf("%s: err %v, want %q", k.cert.Subject.CommonName, err, k.want)
				}
			}
		})
	}
	// The files as AD CS publishes them (base and delta, PEM and DER)
	// load.
	got, err := ParseCRLs(append(pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: base10.Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: delta11.Raw})...))
	if err != nil || len(got) != 2 {
		t.Fatalf("ParseCRLs: %v", err)
	}
	if err := checkRevocation([]*x509.Certificate{inBase, ca.cert}, got, RevocationStrict, now); err == nil {
		t.Fatal("a certificate the base revokes passes with the delta loaded")
	}
}

// TestScopedCRL checks the scope of an issuingDistributionPoint (RFC
// 5280 sections 5.2.5 and 6.3.3): a CRL vouches only for the
// certificates and reasons it covers; a revocation it lists counts
// whatever its scope.
func TestScopedCRL(t *testing.T) {
	const dpA, dpB = "http://pki.example.net/a.crl", "http://pki.example.net/b.crl"
	root := newCRLCert(t, nil, "scope root", true)
	inter := newCRLCert(t, root, "scope intermediate", true)
	leaf := newCRLCert(t, root, "leaf.example.net", false).cert
	leafA := leafWithDP(t, root, "a.example.net", dpA)
	other := newCRLCert(t, nil, "another CA", true)
	now := time.Now().Truncate(time.Second)
	past, future := now.Add(-time.Hour), now.Add(time.Hour)
	scoped := func(n int64, s idpSpec, ents ...crlEnt) *x509.RevocationList {
		return root.make(t, crlSpec{number: n, this: past, next: future, ents: ents, exts: []pkix.Extension{idpExt(s)}})
	}
	type check struct {
		cert *x509.Certificate
		want string
	}
	for _, c := range []struct {
		name   string
		crls   []*x509.RevocationList
		policy Revocation
		checks []check
	}{
		{"ca-only", []*x509.RevocationList{scoped(1, idpSpec{caOnly: true})}, RevocationStrict, []check{
			{leaf, "CRL 1 covers CA certificates only"}, {inter.cert, ""}}},
		{"user-only", []*x509.RevocationList{scoped(1, idpSpec{userOnly: true})}, RevocationStrict, []check{
			{leaf, ""}, {inter.cert, "CRL 1 covers end-entity certificates only"}}},
		{"user-and-ca", []*x509.RevocationList{scoped(1, idpSpec{userOnly: true}), scoped(2, idpSpec{caOnly: true})}, RevocationStrict, []check{
			{leaf, ""}, {inter.cert, ""}}},
		{"attribute-only", []*x509.RevocationList{scoped(1, idpSpec{attrOnly: true})}, RevocationStrict, []check{
			{leaf, "covers attribute certificates only"}}},
		// A CA-only CRL that lists a leaf's serial: revoked all the same.
		{"ca-only-lists-leaf", []*x509.RevocationList{scoped(1, idpSpec{caOnly: true}, crlEnt{cert: leaf, reason: 1})}, RevocationRelaxed, []check{
			{leaf, "is revoked"}}},
		{"some-reasons", []*x509.RevocationList{scoped(1, idpSpec{reasons: 1<<1 | 1<<2})}, RevocationStrict, []check{
			{leaf, "reasons affiliationChanged,superseded,cessationOfOperation,certificateHold,privilegeWithdrawn,aACompromise are covered by none"}}},
		{"reasons-partitioned", []*x509.RevocationList{scoped(1, idpSpec{reasons: 1<<1 | 1<<2}), scoped(2, idpSpec{reasons: allReasons &^ (1<<1 | 1<<2)})}, RevocationStrict, []check{
			{leaf, ""}}},
		{"dp-matches", []*x509.RevocationList{scoped(1, idpSpec{uris: []string{dpA}})}, RevocationStrict, []check{
			{leafA, ""}, {leaf, "is for a distribution point the certificate does not name"}}},
		{"dp-other", []*x509.RevocationList{scoped(1, idpSpec{uris: []string{dpB}})}, RevocationStrict, []check{
			{leafA, "is for a distribution point"}}},
		// Without cRLDistributionPoints a certificate's point is its
		// issuer's name.
		{"dp-issuer-name", []*x509.RevocationList{scoped(1, idpSpec{dirName: root.cert.RawSubject})}, RevocationStrict, []check{
			{leaf, ""}, {leafA, "is for a distribution point"}}},
		// An indirect CRL: the entries after a certificateIssuer are that
		// issuer's, until the next.
		{"indirect", []*x509.RevocationList{scoped(1, idpSpec{indirect: true},
			crlEnt{cert: leafA, exts: []pkix.Extension{certIssuerExt(other.cert.RawSubject)}},
			crlEnt{cert: leaf, exts: []pkix.Extension{certIssuerExt(root.cert.RawSubject)}})}, RevocationStrict, []check{
			{leafA, ""}, {leaf, "is revoked"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range c.checks {
				chain := []*x509.Certificate{k.cert, root.cert}
				if k.cert == inter.cert {
					chain = []*x509.Certificate{inter.cert, root.cert}
				}
				err := checkRevocation(chain, c.crls, c.policy, now)
				switch {
				case k.want == "" && err != nil:
					t.Errorf("%s: %v", k.cert.Subject.CommonName, err)
				case k.want != "" && (err == nil || !strings.Contains(err.Error(), k.want)):
					t.Errorf("%s: err %v, want %q", k.cert.Subject.CommonName, err, k.want)
				}
			}
		})
	}
}

// TestCRLCriticalUnknown: a CRL with a critical extension, or an entry
// with a critical entry extension, that is not understood is refused
// (RFC 5280 sections 5.2 and 5.3): ParseCRLs says which, and a chain
// check does not use it (strict: unknown, naming it; relaxed: what it
// lists does not revoke). Non-critical unknown extensions change
// nothing.
func TestCRLCriticalUnknown(t *testing.T) {
	ca := newCRLCert(t, nil, "critical CA", true)
	leaf := newCRLCert(t, ca, "leaf.example.net", false).cert
	now := time.Now().Truncate(time.Second)
	past, future := now.Add(-time.Hour), now.Add(time.Hour)
	odd := asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 99999, 1}
	for _, c := range []struct {
		name string
		spec crlSpec
		want string // ParseCRLs' error; "" loads
	}{
		{"crl-ext", crlSpec{exts: []pkix.Extension{{Id: odd, Critical: true, Value: []byte{5, 0}}}}, "critical extension 1.3.6.1.4.1.99999.1 not understood (RFC 5280 section 5.2)"},
		{"entry-ext", crlSpec{ents: []crlEnt{{cert: leaf, exts: []pkix.Extension{{Id: odd, Critical: true, Value: []byte{5, 0}}}}}}, "critical entry extension 1.3.6.1.4.1.99999.1 not understood (RFC 5280 section 5.3)"},
		{"bad-idp", crlSpec{exts: []pkix.Extension{{Id: oidIssuingDP, Critical: true, Value: []byte{0x30, 0x03, 0x81, 0x01, 0x01}}}}, "malformed issuingDistributionPoint"},
		{"bad-delta", crlSpec{exts: []pkix.Extension{{Id: oidDeltaCRLIndicator, Critical: true, Value: []byte{4, 0}}}}, "malformed deltaCRLIndicator"},
		{"noncritical", crlSpec{exts: []pkix.Extension{{Id: odd, Value: []byte{5, 0}}}, ents: []crlEnt{{cert: leaf, exts: []pkix.Extension{{Id: odd, Value: []byte{5, 0}}}}}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.spec.number, c.spec.this, c.spec.next = 3, past, future
			if c.want != "" {
				c.spec.ents = append(c.spec.ents, crlEnt{cert: leaf, reason: 1})
			}
			l := ca.make(t, c.spec)
			_, err := ParseCRLs(l.Raw)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := checkRevocation([]*x509.Certificate{leaf, ca.cert}, []*x509.RevocationList{l}, RevocationRelaxed, now); err == nil {
					t.Fatal("the leaf it lists passes")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseCRLs: %v, want %q", err, c.want)
			}
			// A Peer given it directly is refused too.
			if err := (&Peer{Name: "p", CRLs: []*x509.RevocationList{l}}).checkCRLs(); err == nil || !strings.HasPrefix(err.Error(), `ike: peer "p": CRL 1 (`) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("checkCRLs: %v", err)
			}
			chain := []*x509.Certificate{leaf, ca.cert}
			if err := checkRevocation(chain, []*x509.RevocationList{l}, RevocationRelaxed, now); err != nil {
				t.Fatalf("relaxed: a refused CRL revoked: %v", err)
			}
			err = checkRevocation(chain, []*x509.RevocationList{l}, RevocationStrict, now)
			if err == nil || !strings.Contains(err.Error(), "CRL 3 refused: ") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("strict: %v", err)
			}
		})
	}
}

// FuzzCRLExtensions feeds arbitrary values of the CRL extensions
// crlext.go reads (deltaCRLIndicator, issuingDistributionPoint,
// freshestCRL, an entry's certificateIssuer) and of a certificate's
// cRLDistributionPoints to their parsers, and what they accept to the
// scope checks: they may only refuse. kind picks the extension.
func FuzzCRLExtensions(f *testing.F) {
	ca := newCRLCert(f, nil, "fuzz CA", true)
	leaf := leafWithDP(f, ca, "fuzz.example.net", "http://pki.example.net/a.crl")
	plain := newCRLCert(f, ca, "plain.example.net", false).cert
	dpExt := findExt(leaf.Extensions, oidCRLDistPoints)
	delta, err := asn1.Marshal(big.NewInt(10))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(0), delta)
	for _, s := range []idpSpec{{uris: []string{"http://pki.example.net/a.crl"}}, {caOnly: true}, {userOnly: true, reasons: 1<<1 | 1<<6},
		{indirect: true, attrOnly: true}, {dirName: ca.cert.RawSubject}} {
		f.Add(uint8(1), idpExt(s).Value)
	}
	f.Add(uint8(2), adcsExts("http://pki.example.net/d.crl")[0].Value)
	f.Add(uint8(3), certIssuerExt(ca.cert.RawSubject).Value)
	f.Add(uint8(4), dpExt.Value)
	kinds := []asn1.ObjectIdentifier{oidDeltaCRLIndicator, oidIssuingDP, oidFreshestCRL, oidCertificateIssuer, oidCRLDistPoints}
	f.Fuzz(func(t *testing.T, kind uint8, v []byte) {
		id := kinds[int(kind)%len(kinds)]
		l := &x509.RevocationList{Number: big.NewInt(11), RawIssuer: ca.cert.RawSubject,
			Extensions: []pkix.Extension{{Id: id, Critical: true, Value: v}},
			RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: plain.SerialNumber,
				Extensions: []pkix.Extension{{Id: oidCertificateIssuer, Critical: true, Value: v}}}}}
		m, err := parseCRLMeta(l)
		if err == nil {
			if m.scope.reasons&^allReasons != 0 || (m.scope.userOnly && m.scope.caOnly) || (m.delta && m.base.Sign() < 0) {
				t.Fatalf("accepted an impossible scope or base: %+v", m)
			}
			for _, c := range []*x509.Certificate{leaf, plain, ca.cert} {
				if r, _ := m.scope.covers(c); r&^m.scope.reasons != 0 {
					t.Fatalf("covers reasons %v beyond the scope's %v", r, m.scope.reasons)
				}
			}
			crlEntry(l, ca.cert.RawSubject, plain.SerialNumber)
		}
		// The same bytes as a certificate's distribution points.
		cert := *leaf
		cert.Extensions = []pkix.Extension{{Id: oidCRLDistPoints, Value: v}}
		if dps, ok := certDistPoints(&cert); ok {
			for _, d := range dps {
				if d.reasons&^allReasons != 0 || (d.names == nil && d.issuer == nil) {
					t.Fatalf("impossible distribution point %+v", d)
				}
			}
			sc := crlScope{names: []dpName{{der: "\x86\x1chttp://pki.example.net/a.crl"}}, reasons: allReasons}
			sc.covers(&cert)
		}
	})
}
