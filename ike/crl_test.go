package ike

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// crlCA is a certificate authority of the CRL tests, made with
// crypto/x509: a root or an intermediate below one.
type crlCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var crlSerial = big.NewInt(1000)

// newCRLCert makes a certificate named cn for a new key, signed by parent
// (self-signed when parent is nil); ca makes it a CA; dps are the URIs of
// its cRLDistributionPoints.
func newCRLCert(t testing.TB, parent *crlCA, cn string, ca bool, dps ...string) *crlCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	crlSerial = new(big.Int).Add(crlSerial, big.NewInt(1))
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: crlSerial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, CRLDistributionPoints: dps}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	} else {
		tmpl.DNSNames = []string{cn}
	}
	signer, signKey := tmpl, key
	if parent != nil {
		signer, signKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &crlCA{cert: cert, key: key}
}

// crl makes a CRL of ca numbered number, current from this to next (zero:
// no nextUpdate), listing revoked.
func (ca *crlCA) crl(t *testing.T, number int64, this, next time.Time, revoked ...*x509.Certificate) *x509.RevocationList {
	t.Helper()
	tmpl := &x509.RevocationList{Number: big.NewInt(number), ThisUpdate: this, NextUpdate: next}
	for _, c := range revoked {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: c.SerialNumber, RevocationTime: this.Add(-time.Minute)})
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

// TestCheckRevocation checks a chain leaf <- intermediate <- root against
// CRLs under both policies (swanctl's revocation: strict fails an unknown
// status, relaxed only a revoked certificate).
func TestCheckRevocation(t *testing.T) {
	root := newCRLCert(t, nil, "crl root", true)
	inter := newCRLCert(t, root, "crl intermediate", true)
	leaf := newCRLCert(t, inter, "peer.example.net", false)
	other := newCRLCert(t, inter, "other.example.net", false)
	// A CA of the same name as the intermediate, with another key: its
	// CRLs do not verify.
	impostor := newCRLCert(t, root, "crl intermediate", true)
	chain := []*x509.Certificate{leaf.cert, inter.cert, root.cert}
	now := time.Now().Truncate(time.Second)
	past, future := now.Add(-time.Hour), now.Add(time.Hour)

	interOK := inter.crl(t, 1, past, future, other.cert)
	interRevoked := inter.crl(t, 2, past, future, leaf.cert)
	rootOK := root.crl(t, 1, past, future)
	for _, c := range []struct {
		name   string
		crls   []*x509.RevocationList
		policy Revocation
		want   string // a part of the error; "" passes
	}{
		{"none-relaxed", nil, RevocationRelaxed, ""},
		{"none-strict", nil, RevocationStrict, `"CN=peer.example.net": no valid CRL of its issuer "CN=crl intermediate" (revocation strict)`},
		{"listed-others", []*x509.RevocationList{interOK}, RevocationRelaxed, ""},
		{"revoked-relaxed", []*x509.RevocationList{interRevoked}, RevocationRelaxed, "is revoked since"},
		{"revoked-strict", []*x509.RevocationList{interRevoked, rootOK}, RevocationStrict, "is revoked since"},
		{"strict-all-known", []*x509.RevocationList{interOK, rootOK}, RevocationStrict, ""},
		// Strict wants a CRL for each issuer of the chain: the root's
		// for the intermediate too.
		{"strict-root-unknown", []*x509.RevocationList{interOK}, RevocationStrict, `"CN=crl intermediate": no valid CRL of its issuer "CN=crl root"`},
		{"intermediate-revoked", []*x509.RevocationList{interOK, root.crl(t, 2, past, future, inter.cert)}, RevocationRelaxed, `"CN=crl intermediate" (serial`},
		// An expired CRL is no status: unknown, which relaxed lets
		// pass and strict fails.
		{"expired-relaxed", []*x509.RevocationList{inter.crl(t, 3, now.Add(-2*time.Hour), past, leaf.cert)}, RevocationRelaxed, ""},
		{"expired-strict", []*x509.RevocationList{inter.crl(t, 3, now.Add(-2*time.Hour), past, leaf.cert), rootOK}, RevocationStrict, "no valid CRL"},
		{"not-yet-valid", []*x509.RevocationList{inter.crl(t, 3, future, future.Add(time.Hour), leaf.cert)}, RevocationRelaxed, ""},
		// The same issuer name, signed by another key: not the issuer's.
		{"forged-relaxed", []*x509.RevocationList{impostor.crl(t, 9, past, future, leaf.cert)}, RevocationRelaxed, ""},
		{"forged-strict", []*x509.RevocationList{impostor.crl(t, 9, past, future), rootOK}, RevocationStrict, "no valid CRL"},
		// The root's CRL says nothing about the leaf.
		{"other-issuer", []*x509.RevocationList{root.crl(t, 3, past, future, leaf.cert)}, RevocationRelaxed, ""},
		// The newest CRL (highest number) decides, in either order.
		{"newer-unrevokes", []*x509.RevocationList{interRevoked, inter.crl(t, 4, past, future)}, RevocationRelaxed, ""},
		{"newer-revokes", []*x509.RevocationList{inter.crl(t, 5, past, future, leaf.cert), interOK}, RevocationRelaxed, "is revoked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkRevocation(chain, c.crls, c.policy, now)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("%v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

// TestParseCRLs reads PEM (several blocks among others) and DER, and
// refuses what is neither.
func TestParseCRLs(t *testing.T) {
	ca := newCRLCert(t, nil, "crl root", true)
	now := time.Now()
	a, b := ca.crl(t, 1, now, now.Add(time.Hour)), ca.crl(t, 2, now, now.Add(time.Hour))
	pemData := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: a.Raw})...)
	pemData = append(pemData, pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: b.Raw})...)
	got, err := ParseCRLs(pemData)
	if err != nil || len(got) != 2 || got[0].Number.Int64() != 1 || got[1].Number.Int64() != 2 {
		t.Fatalf("PEM: %v, %d CRLs", err, len(got))
	}
	got, err = ParseCRLs(b.Raw)
	if err != nil || len(got) != 1 || got[0].Number.Int64() != 2 {
		t.Fatalf("DER: %v, %d CRLs", err, len(got))
	}
	for name, bad := range map[string][]byte{
		"garbage":     []byte("not a CRL"),
		"empty":       nil,
		"pem-no-crl":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}),
		"pem-bad-crl": pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: []byte{0x30, 0x03, 1, 2, 3}}),
		"truncated":   b.Raw[:len(b.Raw)-5],
	} {
		if _, err := ParseCRLs(bad); err == nil || !strings.HasPrefix(err.Error(), "ike: CRL") {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

// TestParseRevocation reads swanctl's names.
func TestParseRevocation(t *testing.T) {
	for s, want := range map[string]Revocation{"": RevocationRelaxed, "relaxed": RevocationRelaxed, "strict": RevocationStrict} {
		if r, err := ParseRevocation(s); err != nil || r != want {
			t.Errorf("%q: %v %v", s, r, err)
		}
	}
	if _, err := ParseRevocation("ifuri"); err == nil || !strings.Contains(err.Error(), "want relaxed or strict") {
		t.Errorf("ifuri: %v", err)
	}
}

// TestNegotiateRevoked runs IKE_AUTH between two Endpoints whose peers
// authenticate with certificates: the responder refuses the initiator's
// certificate when its CRL lists it (AUTHENTICATION_FAILED, counted), and
// when strict finds no CRL; the initiator refuses the responder's
// likewise; a CRL that lists another certificate lets both pass.
func TestNegotiateRevoked(t *testing.T) {
	now := time.Now()
	crl := func(t *testing.T, ca *testCA, revoked ...*x509.Certificate) *x509.RevocationList {
		der, err := ca.ca.CRL(1, now.Add(-time.Minute), now.Add(time.Hour), revoked...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := ParseCRLs(der)
		if err != nil {
			t.Fatal(err)
		}
		return l[0]
	}
	t.Run("initiator-revoked", func(t *testing.T) {
		pa, pb, ca := certPeers(t, "p256", "p256")
		pb.CRLs = []*x509.RevocationList{crl(t, ca, pa.Certificates[0])}
		p := newPair(t, pa, pb, nil)
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
			t.Fatalf("err %v", err)
		}
		if s := p.b.Stats(); s.AuthFailed != 1 || s.IKESAEstablished != 0 {
			t.Errorf("responder stats: AuthFailed %d, established %d", s.AuthFailed, s.IKESAEstablished)
		}
	})
	t.Run("responder-revoked", func(t *testing.T) {
		pa, pb, ca := certPeers(t, "p256", "p256")
		pa.CRLs = []*x509.RevocationList{crl(t, ca, pb.Certificates[0])}
		p := newPair(t, pa, pb, nil)
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil || !strings.Contains(err.Error(), "is revoked") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("strict-unknown", func(t *testing.T) {
		pa, pb, _ := certPeers(t, "p256", "p256")
		pb.Revocation = RevocationStrict
		p := newPair(t, pa, pb, nil)
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("valid", func(t *testing.T) {
		pa, pb, ca := certPeers(t, "p256", "p256")
		other := ca.issue(t, "c.example.net", genKey(t, "p256").Public())
		pa.CRLs = []*x509.RevocationList{crl(t, ca, other)}
		pb.CRLs, pb.Revocation = pa.CRLs, RevocationStrict
		p := newPair(t, pa, pb, nil)
		c, err := p.a.Initiate(ctx(t), "to-b")
		if err != nil {
			t.Fatal(err)
		}
		checkMirror(t, c, p.respChild(t), "aes128gcm16", false)
	})
}
