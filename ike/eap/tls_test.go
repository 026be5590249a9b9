package eap

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"math/big"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// testCA is a CA that issues test certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t testing.TB, cn string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key}
}

// issue returns a leaf certificate for cn; pad makes it larger, to force
// fragmentation.
func (ca *testCA) issue(t testing.TB, cn string, pad int) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn, OrganizationalUnit: []string{strings.Repeat("x", pad)}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{cn},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// testTLSConfig returns a server configuration whose certificate and
// client CAs come from ca (a new CA when nil).
func testTLSConfig(t testing.TB, ca *testCA) *tls.Config {
	if ca == nil {
		ca = newTestCA(t, "test CA")
	}
	return &tls.Config{Certificates: []tls.Certificate{ca.issue(t, "moon.strongswan.org", 0)}, ClientCAs: ca.pool()}
}

// tlsPeer is an EAP-TLS peer for tests: crypto/tls as the client on the
// package's engine, with fragmentation as RFC 5216 section 2.1.5 has it.
type tlsPeer struct {
	t    testing.TB
	eng  *tlsEngine
	frag int
	in   []byte
	out  []byte
	off  int
	done bool
	err  error
}

func newTLSPeer(t testing.TB, cfg *tls.Config, frag int) *tlsPeer {
	read := func(c *tls.Conn) error {
		if c.ConnectionState().Version != tls.VersionTLS13 {
			return nil
		}
		var b [1]byte // the commitment message (RFC 9190 section 2.5)
		if _, err := c.Read(b[:]); err != nil {
			return err
		}
		if b[0] != 0 {
			t.Errorf("commitment message %#x, want 0x00", b[0])
		}
		return nil
	}
	p := &tlsPeer{t: t, frag: frag, eng: newTLSEngine(func(c net.Conn) *tls.Conn { return tls.Client(c, cfg) }, read)}
	t.Cleanup(p.eng.close)
	return p
}

func (p *tlsPeer) msk() []byte {
	st := p.eng.conn.ConnectionState()
	var km []byte
	var err error
	if st.Version == tls.VersionTLS13 {
		km, err = st.ExportKeyingMaterial("EXPORTER_EAP_TLS_Key_Material", []byte{0x0d}, 128)
	} else {
		km, err = st.ExportKeyingMaterial("client EAP encryption", nil, 128)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	return km[:64]
}

func (p *tlsPeer) respond(b []byte) []byte {
	p.t.Helper()
	q, err := Parse(b)
	if err != nil {
		p.t.Fatalf("peer: %v", err)
	}
	if q.Code != CodeRequest {
		return nil
	}
	r := Packet{Code: CodeResponse, Identifier: q.Identifier, Type: q.Type}
	if q.Type == TypeIdentity {
		r.Data = []byte("carol@strongswan.org")
		return r.Marshal()
	}
	flags, body := q.Data[0], q.Data[1:]
	if flags&tlsFlagLength != 0 {
		body = body[4:]
	}
	switch {
	case flags&tlsFlagStart != 0:
		p.out, _, p.err = p.eng.feed(nil)
	case p.off < len(p.out):
		// the server acknowledged a fragment of ours
	case flags&tlsFlagMore != 0:
		p.in = append(p.in, body...)
		r.Data = []byte{0}
		return r.Marshal()
	default:
		p.in = append(p.in, body...)
		p.out, p.done, p.err = p.eng.feed(p.in)
		p.in, p.off = nil, 0
	}
	if p.err != nil {
		p.t.Logf("peer handshake: %v", p.err)
	}
	rest := p.out[p.off:]
	n := min(len(rest), p.frag)
	f := byte(0)
	if n < len(rest) {
		f = tlsFlagMore
		if p.off == 0 {
			f |= tlsFlagLength
		}
	}
	r.Data = []byte{f}
	if f&tlsFlagLength != 0 {
		r.Data = binary.BigEndian.AppendUint32(r.Data, uint32(len(p.out)))
	}
	r.Data = append(r.Data, rest[:n]...)
	p.off += n
	return r.Marshal()
}

func checkNoLeak(t *testing.T) {
	n := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > n && time.Now().Before(deadline) {
			runtime.Gosched()
			time.Sleep(10 * time.Millisecond)
		}
		if g := runtime.NumGoroutine(); g > n {
			t.Errorf("%d goroutines left, %d before", g, n)
		}
	})
}

func TestTLSSession(t *testing.T) {
	ca := newTestCA(t, "strongSwan CA")
	for _, c := range []struct {
		name       string
		version    uint16
		serverFrag int
		peerFrag   int
		pad        int
	}{
		{"TLS 1.2", tls.VersionTLS12, 0, 1024, 0},
		{"TLS 1.3", tls.VersionTLS13, 0, 1024, 0},
		{"TLS 1.2 fragmented both ways", tls.VersionTLS12, 200, 150, 600},
		{"TLS 1.3 fragmented both ways", tls.VersionTLS13, 200, 150, 600},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkNoLeak(t)
			scfg := testTLSConfig(t, ca)
			s, err := NewServer(&Config{Methods: []Type{TypeTLS}, TLS: scfg, FragmentSize: c.serverFrag})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ccfg := &tls.Config{
				Certificates: []tls.Certificate{ca.issue(t, "carol@strongswan.org", c.pad)},
				RootCAs:      ca.pool(), ServerName: "moon.strongswan.org",
				MinVersion: c.version, MaxVersion: c.version,
			}
			p := newTLSPeer(t, ccfg, c.peerFrag)
			var maxLen int
			last, err := run(t, s, func(b []byte) []byte {
				maxLen = max(maxLen, len(b))
				r := p.respond(b)
				maxLen = max(maxLen, len(r))
				return r
			})
			if err != nil || s.State() != Succeeded || Code(last[0]) != CodeSuccess {
				t.Fatalf("state %s err %v", s.State(), err)
			}
			if !p.done {
				t.Fatal("peer's handshake not done")
			}
			if got := p.eng.conn.ConnectionState().Version; got != c.version {
				t.Fatalf("version %#x, want %#x", got, c.version)
			}
			if msk := s.MSK(); len(msk) != 64 || !bytes.Equal(msk, p.msk()) {
				t.Fatalf("MSK %X, peer's %X", msk, p.msk())
			}
			if certs := s.PeerCertificates(); len(certs) != 1 || certs[0].Subject.CommonName != "carol@strongswan.org" {
				t.Fatalf("peer certificates %v", certs)
			}
			// EAP-TLS proves a certificate, not the EAP-Identity answer.
			if s.Identity() != "" || s.Claimed() != "carol@strongswan.org" {
				t.Fatalf("identity %q, claimed %q; want none proven and the EAP-Identity answer claimed", s.Identity(), s.Claimed())
			}
			if len(s.VerifiedChains()) == 0 {
				t.Fatal("no verified chain after Success")
			}
			if c.serverFrag > 0 && maxLen > c.serverFrag+10 {
				t.Fatalf("a packet of %d octets, fragments of %d asked", maxLen, c.serverFrag)
			}
		})
	}
}

// The TLS 1.2 MSK is RFC 5216 section 2.3's PRF, checked against
// crypto/tls's exporter (which the in-test peer uses, with the extended
// master secret); prf12 itself against a published vector: the TLS 1.2
// PRF-SHA256 test of the IETF TLS mailing list
// (https://mailarchive.ietf.org/arch/msg/tls/fzVCzk-z3FShgGJ6DOXqM1ydxms/).
func TestPRF12(t *testing.T) {
	secret := unhex(t, "9bbe436ba940f017b17652849a71db35")
	seed := unhex(t, "a0ba9f936cda311827a6f796ffd5198c")
	want := unhex(t, "e3f229ba727be17b8d122620557cd453c2aab21d07c3d495329b52d4e61edb5a6b301791e90d35c9c9a46b4e14baf9af0fa022f7077def17abfd3797c0564bab4fbc91666e9def9b97fce34f796789baa48082d122ee42c5a72e5a5110fff70187347b66")
	if got := prf12(sha256New, secret, "test label", seed, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("prf12 = %x\nwant %x", got, want)
	}
}

// A client certificate from another CA, or none, ends in Failure.
func TestTLSRefusesClient(t *testing.T) {
	ca := newTestCA(t, "strongSwan CA")
	other := newTestCA(t, "other CA")
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
	}{
		{"untrusted", []tls.Certificate{other.issue(t, "mallory", 0)}},
		{"none", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkNoLeak(t)
			s, err := NewServer(&Config{Methods: []Type{TypeTLS}, TLS: testTLSConfig(t, ca)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ccfg := &tls.Config{RootCAs: ca.pool(), ServerName: "moon.strongswan.org"}
			if len(c.certs) > 0 {
				// Sent though the server asks for another CA's.
				ccfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c.certs[0], nil }
			}
			p := newTLSPeer(t, ccfg, 1024)
			last, err := run(t, s, p.respond)
			if err == nil || s.State() != Failed || Code(last[0]) != CodeFailure || s.MSK() != nil {
				t.Fatalf("state %s err %v", s.State(), err)
			}
			// The certificate tried is known (its owner logs who tried),
			// and nothing says it verified.
			if s.VerifiedChains() != nil {
				t.Fatalf("verified chains %v after a refusal", s.VerifiedChains())
			}
			if certs := s.PeerCertificates(); len(c.certs) > 0 && (len(certs) != 1 || certs[0].Subject.CommonName != "mallory") {
				t.Fatalf("peer certificates %v, want mallory's", certs)
			}
			t.Log(err)
		})
	}
}

// TestTLSIdentityUnproven: with an identity configured (eap_id = "alice")
// a certificate from the trusted CA for another user completes the TLS
// handshake, but the session does not report the configured identity as
// proven: Identity is empty, the configured one is only Claimed, and the
// certificate is carol's, for the owner (package ike) to match against
// the identity and refuse.
func TestTLSIdentityUnproven(t *testing.T) {
	checkNoLeak(t)
	ca := newTestCA(t, "strongSwan CA")
	s, err := NewServer(&Config{Methods: []Type{TypeTLS}, TLS: testTLSConfig(t, ca), Identity: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := newTLSPeer(t, &tls.Config{Certificates: []tls.Certificate{ca.issue(t, "carol", 0)}, RootCAs: ca.pool(),
		ServerName: "moon.strongswan.org"}, 1024)
	if _, err := run(t, s, p.respond); err != nil || s.State() != Succeeded {
		t.Fatalf("state %s err %v", s.State(), err)
	}
	if s.Identity() != "" || s.Claimed() != "alice" {
		t.Fatalf("identity %q claimed %q; want \"\" and alice", s.Identity(), s.Claimed())
	}
	if certs := s.PeerCertificates(); len(certs) != 1 || certs[0].Subject.CommonName != "carol" {
		t.Fatalf("peer certificates %v, want carol's", certs)
	}
}

// Oversized or inconsistent TLS messages end in Failure.
func TestTLSBadMessages(t *testing.T) {
	checkNoLeak(t)
	cfg := &Config{Methods: []Type{TypeTLS}, TLS: testTLSConfig(t, nil), Identity: "carol"}
	l := func(n uint32, data ...byte) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{tlsFlagLength | tlsFlagMore}, n), data...)
	}
	for _, c := range []struct {
		name  string
		steps [][]byte
	}{
		{"no flags", [][]byte{{}}},
		{"L without length", [][]byte{{tlsFlagLength, 0, 0}}},
		{"L too big", [][]byte{l(1 << 20)}},
		{"L changes", [][]byte{l(10, 1), l(11, 2)}},
		{"more than L", [][]byte{l(2, 1), {0, 2, 3}}},
		{"over 64 KiB unannounced", [][]byte{append([]byte{tlsFlagMore}, make([]byte, 40000)...), append([]byte{tlsFlagMore}, make([]byte, 40000)...)}},
		{"empty before the handshake ends", [][]byte{{0}}},
		{"garbage record", [][]byte{{0, 99, 3, 3, 0, 1, 0}}},
	} {
		s, err := NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := s.Start()
		for _, d := range c.steps {
			out, err = s.Process(Packet{Code: CodeResponse, Identifier: out[1], Type: TypeTLS, Data: d}.Marshal())
			if err != nil {
				break
			}
		}
		if err == nil || Code(out[0]) != CodeFailure {
			t.Errorf("%s: err %v, packet % x; want Failure", c.name, err, out[:min(len(out), 8)])
		}
		s.Close()
	}
}

var sha256New = sha256.New

// A session dropped in the middle of the handshake without Close (its
// IKE SA went away) does not keep the handshake's goroutine.
func TestTLSAbandoned(t *testing.T) {
	ca := newTestCA(t, "strongSwan CA")
	scfg := testTLSConfig(t, ca)
	before := runtime.NumGoroutine()
	func() {
		s, err := NewServer(&Config{Methods: []Type{TypeTLS}, TLS: scfg, Identity: "carol"})
		if err != nil {
			t.Fatal(err)
		}
		p := newTLSPeer(t, &tls.Config{Certificates: []tls.Certificate{ca.issue(t, "carol", 0)}, RootCAs: ca.pool(), ServerName: "moon.strongswan.org"}, 4096)
		out, _ := s.Start()
		out, err = s.Process(p.respond(out)) // ClientHello in, ServerHello out
		if err != nil || s.State() != Running {
			t.Fatalf("%v %s", err, s.State())
		}
		if len(out) < 100 {
			t.Fatalf("server sent %d octets, want its first flight", len(out))
		}
		p.eng.close()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Fatalf("%d goroutines, %d before: the abandoned handshake's goroutine is left", g, before)
	}
}
