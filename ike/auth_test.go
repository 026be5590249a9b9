package ike

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/gateway/certgen"
)

var rsaKeys struct {
	once sync.Once
	k    [2]*rsa.PrivateKey
	err  error
	next atomic.Uint32
}

// testCA is a throwaway CA that issues certificates for the tests.
type testCA struct {
	cert *x509.Certificate
	ca   *certgen.CA
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	ca, err := certgen.NewCA("sluice test CA")
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: ca.Cert, ca: ca}
}

// issue certifies pub for the identity name (an e-mail address when it
// has an @, else a DNS name).
func (ca *testCA) issue(t testing.TB, name string, pub crypto.PublicKey) *x509.Certificate {
	t.Helper()
	cert, err := ca.ca.Certify(pub, []string{name})
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func genKey(t testing.TB, kind string) crypto.Signer {
	t.Helper()
	var k crypto.Signer
	var err error
	switch kind {
	case "p256":
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "p384":
		k, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "p521":
		k, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	case "rsa":
		// RSA key generation is slow (seconds under -race): two keys made
		// once with openssl genpkey (testdata/rsa-test-*.pem, test keys
		// only) serve every test, handed out in turn so two calls differ.
		rsaKeys.once.Do(func() {
			for i := range rsaKeys.k {
				var pemData []byte
				if pemData, rsaKeys.err = os.ReadFile(fmt.Sprintf("testdata/rsa-test-%d.pem", i+1)); rsaKeys.err != nil {
					return
				}
				blk, _ := pem.Decode(pemData)
				if blk == nil {
					rsaKeys.err = errors.New("no PEM block")
					return
				}
				var key any
				if key, rsaKeys.err = x509.ParsePKCS8PrivateKey(blk.Bytes); rsaKeys.err != nil {
					return
				}
				rsaKeys.k[i] = key.(*rsa.PrivateKey)
			}
		})
		if rsaKeys.err != nil {
			t.Fatal(rsaKeys.err)
		}
		return rsaKeys.k[rsaKeys.next.Add(1)%uint32(len(rsaKeys.k))]
	case "ed25519":
		_, k, err = ed25519.GenerateKey(rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSignVerify(t *testing.T) {
	octets := []byte("the signed octets of section 2.15")
	all := []uint16{HashSHA256, HashSHA384, HashSHA512, HashIdentity}
	cases := []struct {
		key    string
		method AuthMethod
		hashes []uint16
		want   AuthMethod
	}{
		{"p256", 0, all, AuthDigitalSig}, {"p384", 0, all, AuthDigitalSig}, {"rsa", 0, all, AuthDigitalSig}, {"ed25519", 0, all, AuthDigitalSig},
		{"p256", 0, nil, AuthECDSA256}, {"p384", 0, nil, AuthECDSA384}, {"p521", 0, nil, AuthECDSA521}, {"rsa", 0, nil, AuthRSASig},
		{"p384", AuthECDSA384, all, AuthECDSA384}, {"rsa", AuthRSASig, all, AuthRSASig},
		{"p384", 0, []uint16{HashSHA256}, AuthECDSA384}, // P-384 signs with SHA-384 only
	}
	for _, c := range cases {
		k := genKey(t, c.key)
		a, err := signAuth(c.method, k, octets, c.hashes)
		if err != nil {
			t.Fatalf("%s/%d: %v", c.key, c.method, err)
		}
		if a.Method != c.want {
			t.Fatalf("%s/%d: method %d, want %d", c.key, c.method, a.Method, c.want)
		}
		if err := verifyAuth(a, k.Public(), octets); err != nil {
			t.Fatalf("%s/%d: %v", c.key, c.method, err)
		}
		if err := verifyAuth(a, k.Public(), append([]byte("x"), octets...)); err == nil {
			t.Fatalf("%s/%d: verified other octets", c.key, c.method)
		}
		if err := verifyAuth(a, genKey(t, c.key).Public(), octets); err == nil {
			t.Fatalf("%s/%d: verified with another key", c.key, c.method)
		}
		for i := 0; i < len(a.Data); i += 1 + i%5 {
			b := &Auth{Method: a.Method, Data: append([]byte(nil), a.Data...)}
			b.Data[i] ^= 0x10
			if verifyAuth(b, k.Public(), octets) == nil {
				t.Fatalf("%s/%d: byte %d changed and still verified", c.key, c.method, i)
			}
		}
	}
	if _, err := signAuth(AuthDigitalSig, genKey(t, "p256"), octets, []uint16{HashSHA1}); err == nil {
		t.Fatal("RFC 7427 without a common hash")
	}
}

// TestAlgorithmIdentifiers checks our DER AlgorithmIdentifiers against the
// encodings RFC 7427 Appendix A lists (A.1.3 sha256WithRSAEncryption,
// A.3.1 ecdsa-with-sha256) and RFC 8410 section 3 (id-Ed25519, used by RFC
// 8420).
func TestAlgorithmIdentifiers(t *testing.T) {
	want := map[string]string{
		"sha256WithRSAEncryption": "300d06092a864886f70d01010b0500",
		"ecdsa-with-SHA256":       "300a06082a8648ce3d040302",
		"Ed25519":                 "300506032b6570",
	}
	got := map[string][]byte{
		"sha256WithRSAEncryption": sigAlgs[0].algorithmIdentifier(),
		"ecdsa-with-SHA256":       sigAlgs[3].algorithmIdentifier(),
		"Ed25519":                 sigAlgs[6].algorithmIdentifier(),
	}
	for name, w := range want {
		if g := got[name]; string(unhex(t, w)) != string(g) {
			t.Errorf("%s: %x, want %s", name, g, w)
		}
		if _, err := parseAlgorithmIdentifier(unhex(t, w)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// certPeers makes a pair whose sides authenticate with certificates of
// kinds ka and kb from one CA.
func certPeers(t *testing.T, ka, kb string) (*Peer, *Peer, *testCA) {
	pa, pb := peers(t, "aes128-sha256-x25519", "aes128gcm16", "aes128-sha256-x25519", "aes128gcm16")
	ca := newTestCA(t)
	sa, sb := genKey(t, ka), genKey(t, kb)
	pa.PSK, pb.PSK = nil, nil
	pa.Signer, pa.Certificates, pa.RemoteCAs = sa, []*x509.Certificate{ca.issue(t, "a@example.net", sa.Public())}, []*x509.Certificate{ca.cert}
	pb.Signer, pb.Certificates, pb.RemoteCAs = sb, []*x509.Certificate{ca.issue(t, "b.example.net", sb.Public())}, []*x509.Certificate{ca.cert}
	return pa, pb, ca
}

func TestNegotiateCertificates(t *testing.T) {
	for _, c := range []struct {
		a, b   string
		method AuthMethod
	}{{"p256", "p256", 0}, {"rsa", "p384", 0}, {"ed25519", "p256", 0}, {"p384", "rsa", AuthECDSA384}, {"rsa", "p521", AuthRSASig}} {
		t.Run(c.a+"-"+c.b, func(t *testing.T) {
			pa, pb, _ := certPeers(t, c.a, c.b)
			pa.AuthMethod = c.method
			p := newPair(t, pa, pb, nil)
			ca, err := p.a.Initiate(ctx(t), "to-b")
			if err != nil {
				t.Fatal(err)
			}
			checkMirror(t, ca, p.respChild(t), "aes128gcm16", false)
		})
	}
}

// TestNegotiateEngineSigner signs with keys held by cryptodev's soft
// engine (cryptodev.NewSigner): ECDSA P-256 and RSA through RFC 7427.
func TestNegotiateEngineSigner(t *testing.T) {
	eng := soft.New()
	signer := func(kind string) crypto.Signer {
		k, err := eng.NewPrivateKey(genKey(t, kind))
		if err != nil {
			t.Fatal(err)
		}
		s, err := cryptodev.NewSigner(eng, k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	pa, pb, ca := certPeers(t, "p256", "p256")
	pa.Signer = signer("p256")
	pa.Certificates = []*x509.Certificate{ca.issue(t, "a@example.net", pa.Signer.Public())}
	pb.Signer = signer("rsa")
	pb.Certificates = []*x509.Certificate{ca.issue(t, "b.example.net", pb.Signer.Public())}
	p := newPair(t, pa, pb, nil)
	c, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	checkMirror(t, c, p.respChild(t), "aes128gcm16", false)
}

func TestNegotiateMixedAuth(t *testing.T) {
	// The initiator signs; the responder answers with the PSK.
	pa, pb, _ := certPeers(t, "p256", "p256")
	pa.RemoteCAs, pa.PSK = nil, []byte("secret")
	pb.Signer, pb.Certificates, pb.PSK = nil, nil, []byte("secret")
	p := newPair(t, pa, pb, nil)
	c, err := p.a.Initiate(ctx(t), "to-b")
	if err != nil {
		t.Fatal(err)
	}
	checkMirror(t, c, p.respChild(t), "aes128gcm16", false)
}

func TestCertificateFailures(t *testing.T) {
	t.Run("other-ca", func(t *testing.T) {
		pa, pb, _ := certPeers(t, "p256", "p256")
		pb.RemoteCAs = []*x509.Certificate{newTestCA(t).cert}
		p := newPair(t, pa, pb, nil)
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("identity-not-in-cert", func(t *testing.T) {
		pa, pb, ca := certPeers(t, "p256", "p256")
		pb.Certificates = []*x509.Certificate{ca.issue(t, "c.example.net", pb.Signer.Public())}
		p := newPair(t, pa, pb, nil)
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil || !strings.Contains(err.Error(), "does not name") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("psk-where-cert-required", func(t *testing.T) {
		pa, pb, _ := certPeers(t, "p256", "p256")
		pa.Signer, pa.Certificates, pa.PSK, pb.PSK = nil, nil, []byte("secret"), []byte("secret")
		p := newPair(t, pa, pb, nil)
		if _, err := p.a.Initiate(ctx(t), "to-b"); err == nil || !strings.Contains(err.Error(), "AUTHENTICATION_FAILED") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("config", func(t *testing.T) {
		pa, _, _ := certPeers(t, "p256", "p256")
		pa.Signer = genKey(t, "p256") // not the certificate's key
		if _, err := NewEndpoint(Config{Peers: []*Peer{pa}}, transportFunc(func(netip.AddrPort, netip.AddrPort, []byte) error { return nil })); err == nil {
			t.Fatal("a Signer that is not the certificate's key was accepted")
		}
	})
}

// FuzzVerifyAuth feeds arbitrary AUTH payloads to the verifiers of every
// method and key type: they may only fail.
func FuzzVerifyAuth(f *testing.F) {
	keys := []crypto.Signer{genKey(f, "p256"), genKey(f, "rsa"), genKey(f, "ed25519")}
	octets := []byte("octets")
	for _, k := range keys {
		for _, h := range [][]uint16{nil, {HashSHA256, HashIdentity}} {
			a, err := signAuth(0, k, octets, h)
			if err != nil {
				continue // Ed25519 has no method without RFC 7427
			}
			f.Add(uint8(a.Method), a.Data)
		}
	}
	f.Fuzz(func(t *testing.T, method uint8, data []byte) {
		for _, k := range keys {
			verifyAuth(&Auth{Method: AuthMethod(method), Data: data}, k.Public(), octets)
		}
	})
}
