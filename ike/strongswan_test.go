package ike_test

// sluice's IKEv2 against strongSwan 5.9.8's charon (kernel-libipsec), PSK:
//
//  1. Namespaces "ss" (charon, 192.0.2.1, site 10.1.0.0/24) and "sl"
//     (sluice's ike.Endpoint on UDP 500 and 4500 of 192.0.2.2, site
//     10.2.0.0/24), joined by a veth. charon runs with its own
//     strongswan.conf (STRONGSWAN_CONF) and a private /run, driven by
//     swanctl over its own vici socket; its filelog has chd = 4, which logs
//     the Child SA keys.
//  2. Either sluice initiates to charon, or charon (swanctl --initiate)
//     to sluice. charon's encap = yes fakes a NAT, so both move to 4500.
//  3. The Child SA sluice reports must carry the SPIs, suite and keys
//     charon logged.
//  4. The side that initiated deletes the IKE SA (INFORMATIONAL); the
//     other must forget it.

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/gateway/certgen"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/internal/lab"
)

var (
	ssWAN   = netip.MustParsePrefix("192.0.2.1/24")
	slWAN   = netip.MustParsePrefix("192.0.2.2/24")
	ssSite  = netip.MustParsePrefix("10.1.0.0/24")
	slSite  = netip.MustParsePrefix("10.2.0.0/24")
	ssIDStr = "strongswan@interop.sluice"
	slIDStr = "sluice@interop.sluice"
)

// TestStrongSwanInterop negotiates with charon in both roles, for IKE
// suites with an AEAD and with CBC+HMAC, and checks the Child SA keys
// against the ones charon logged.
func TestStrongSwanInterop(t *testing.T) {
	cases := []struct{ ike, esp string }{
		{"aes256gcm16-prfsha384-ecp384", "aes128gcm16"},
		{"aes128-sha256-modp2048", "aes128gcm16"},
		{"aes256-sha256-x25519", "aes256-sha256"},
		{"aes256gcm16-prfsha384-ecp384", "aes128gcm16-ecp256"}, // PFS on rekey
	}
	for _, c := range cases {
		for _, role := range []string{"initiator", "responder"} {
			t.Run(fmt.Sprintf("sluice-%s/%s/%s", role, c.ike, c.esp), func(t *testing.T) {
				lab.RequireCharon(t)
				interop(t, role == "initiator", c.ike, c.esp, nil)
			})
		}
	}
}

// TestStrongSwanInteropCert negotiates with charon in both roles, both
// sides authenticating with certificates: RFC 7427 signatures with an RSA
// key on sluice's side and the RFC 4754 ECDSA method with a P-256 key.
func TestStrongSwanInteropCert(t *testing.T) {
	for _, c := range []struct {
		role string
		auth certAuth
	}{
		{"initiator", certAuth{sluiceKey: "rsa", charonKey: "p384"}},
		{"responder", certAuth{sluiceKey: "p256", charonKey: "rsa", method: ike.AuthECDSA256}},
	} {
		t.Run(fmt.Sprintf("sluice-%s/%s-%s", c.role, c.auth.sluiceKey, c.auth.charonKey), func(t *testing.T) {
			lab.RequireCharon(t)
			interop(t, c.role == "initiator", "aes256gcm16-prfsha384-ecp384", "aes128gcm16", &c.auth)
		})
	}
}

// TestStrongSwanInteropDN negotiates with charon in both roles, both
// sides identified by distinguished names (id = "CN=...") and
// authenticating with certificates whose subjects are those names in
// UTF8String, as openssl writes them, while charon sends its IDi/IDr with
// PrintableStrings: the names must match by value (issue 16, defect 6).
func TestStrongSwanInteropDN(t *testing.T) {
	for _, role := range []string{"initiator", "responder"} {
		t.Run("sluice-"+role, func(t *testing.T) {
			lab.RequireCharon(t)
			interop(t, role == "initiator", "aes256gcm16-prfsha384-ecp384", "aes128gcm16", &certAuth{sluiceKey: "p256", charonKey: "p256", dn: true})
		})
	}
}

// TestStrongSwanHalfOpenFlood: a host beside charon (192.0.2.3) floods
// sluice with IKE_SA_INIT requests with fresh SPIs, answering every
// cookie; charon, a legitimate peer, initiates during the flood and gets
// its IKE and Child SA at once, while the flooder holds no more than
// block_threshold (5) half-open SAs (issue 16, defect 8: the flooder took
// every half-open place and charon timed out).
func TestStrongSwanHalfOpenFlood(t *testing.T) {
	lab.RequireCharon(t)
	const props = "aes256-sha256-x25519" // the flood's KE is X25519
	b := newBed(t, props, "aes128gcm16", nil, func(p *ike.Peer, c *ike.Config) {
		p.Remote = netip.Addr{} // any initiator: the flood's requests fit too
		c.MaxHalfOpen, c.CookieThreshold = 32, 4
	})
	flooder := netip.MustParseAddr("192.0.2.3")
	if err := b.ssNS.AddAddr("wan0", netip.PrefixFrom(flooder, 24)); err != nil {
		t.Fatal(err)
	}
	fc, err := b.ssNS.ListenUDP(netip.AddrPortFrom(flooder, 0))
	if err != nil {
		t.Fatal(err)
	}
	ikeP, err := ike.ParseProposals(ike.ProtoIKE, props)
	if err != nil {
		t.Fatal(err)
	}
	sent, answered := ike.Flood(t, fc, netip.AddrPortFrom(slWAN.Addr(), 500), ikeP)
	ike.WaitFlood(t, b.ep, answered)

	before, start := sent.Load(), time.Now()
	out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", "net", "--timeout", "20")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("charon initiating during the flood: %v after %v\n%s\n(sluice stats %+v)", err, took, out, b.ep.Stats())
	}
	b.waitChild(t, 1, "sluice's Child SA")
	s := b.ep.Stats()
	t.Logf("charon connected in %v while the flooder sent %d requests (%d in all, %d cookies answered); sluice %+v",
		took.Round(time.Millisecond), sent.Load()-before, sent.Load(), answered.Load(), s)
	ike.FloodGoesOn(t, sent)
	if held := ike.HalfOpenFrom(b.ep, flooder); s.RxBlocked == 0 || held > ike.DefaultBlockThreshold {
		t.Fatalf("the flooder holds %d half-open SAs, RxBlocked %d", held, s.RxBlocked)
	}
}

// TestStrongSwanManyChildren: one IKE SA between charon and sluice
// carries 20 Child SAs, each child of the connection made with
// CREATE_CHILD_SA by either side, as strongSwan allows (issue 16, defect
// 7: sluice refused the ninth with NO_ADDITIONAL_SAS).
func TestStrongSwanManyChildren(t *testing.T) {
	const n = 20
	for _, by := range []string{"sluice", "charon"} {
		t.Run("by-"+by, func(t *testing.T) {
			lab.RequireCharon(t)
			var more strings.Builder
			var children []ike.Child
			for i := 1; i < n; i++ {
				ss, sl := fmt.Sprintf("10.1.%d.0/24", 100+i), fmt.Sprintf("10.2.%d.0/24", 100+i)
				fmt.Fprintf(&more, "      c%d {\n        mode = tunnel\n        local_ts = %s\n        remote_ts = %s\n        esp_proposals = aes128gcm16\n"+
					"        rekey_time = 0s\n        life_time = 0s\n        start_action = none\n      }\n", i, ss, sl)
				children = append(children, ike.Child{Name: fmt.Sprintf("c%d", i),
					LocalTS: []netip.Prefix{netip.MustParsePrefix(sl)}, RemoteTS: []netip.Prefix{netip.MustParsePrefix(ss)}})
			}
			b := newBedVars(t, "aes256gcm16-prfsha384-ecp384", "aes128gcm16", nil, func(p *ike.Peer, _ *ike.Config) {
				p.ChildName, p.Children = "net", children
			}, map[string]string{"More": more.String()})
			// charon needs an address in each local selector.
			for _, c := range children {
				if err := b.c.Netns().AddAddr("lo", netip.PrefixFrom(c.RemoteTS[0].Addr().Next(), 32)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := b.ep.Initiate(b.ctx, "strongswan"); err != nil {
				t.Fatal(err)
			}
			for i, c := range children {
				if by == "sluice" {
					if _, err := b.ep.InitiateChild(b.ctx, "strongswan", c.Name); err != nil {
						t.Fatalf("child %d of %d: %v (stats %+v)", i+2, n, err, b.ep.Stats())
					}
					continue
				}
				if out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", c.Name, "--timeout", "20"); err != nil {
					t.Fatalf("charon initiating child %d of %d: %v\n%s (sluice stats %+v)", i+2, n, err, out, b.ep.Stats())
				}
			}
			b.waitChild(t, n, "sluice to report every Child SA")
			if sa := b.oneIKESA(t); len(sa.Children) != n {
				t.Fatalf("sluice's IKE SA carries %d Child SAs, want %d", len(sa.Children), n)
			}
			err := lab.WaitFor(b.ctx, "charon to list every child", 10*time.Second, 50*time.Millisecond, func() (bool, error) {
				out, err := b.c.Swanctl(b.ctx, "--list-sas")
				return err == nil && strings.Count(out, "INSTALLED, TUNNEL") == n && strings.Count(out, "interop: #") == 1, err
			})
			if err != nil {
				t.Fatal(err)
			}
			if s := b.ep.Stats(); s.ChildSALimit != 0 || s.ChildSAAdded != n-1 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// DN identities of TestStrongSwanInteropDN.
const (
	ssDN = "CN=sw.example.test"
	slDN = "CN=sl.example.test"
)

// ids are charon's and sluice's identities for a test with cert.
func ids(cert *certAuth) (ss, sl string) {
	if cert != nil && cert.dn {
		return ssDN, slDN
	}
	return ssIDStr, slIDStr
}

// utf8Subject is the DER of the Name CN=cn with a UTF8String value.
func utf8Subject(t *testing.T, cn string) []byte {
	t.Helper()
	der, err := asn1.Marshal(pkix.RDNSequence{{{Type: asn1.ObjectIdentifier{2, 5, 4, 3},
		Value: asn1.RawValue{Tag: asn1.TagUTF8String, Bytes: []byte(cn)}}}})
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// testCreds are the certificates and keys of one certificate test: a CA,
// charon's certificate and key as files in its swanctl directory, sluice's
// certificate and its key inside cryptodev's soft engine.
type testCreds struct {
	ca                 *x509.Certificate
	caFile, charonCert string // file names in x509ca/ and x509/ of swanctl's directory
	sluiceCert         *x509.Certificate
	signer             crypto.Signer
	// issuer is the CA (for CRLs), charon charon's certificate.
	issuer *certgen.CA
	charon *x509.Certificate
}

// newTestCreds makes a CA and the certificates of a, and writes charon's
// into its swanctl directory.
func newTestCreds(t *testing.T, c *lab.Charon, a *certAuth) *testCreds {
	t.Helper()
	ca, err := certgen.NewCA("sluice interop CA")
	if err != nil {
		t.Fatal(err)
	}
	var extra []pkix.Extension
	if a.pad > 0 {
		// A private, non-critical extension: an OCTET STRING of padding
		// that both sides skip.
		v, err := asn1.Marshal(make([]byte, a.pad))
		if err != nil {
			t.Fatal(err)
		}
		extra = []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 32473, 1}, Value: v}}
	}
	issue := func(id string, pub crypto.PublicKey) *x509.Certificate {
		var cert *x509.Certificate
		var err error
		if a.dn {
			// The subject is the DN id; the subjectAltName its CN.
			cn := strings.TrimPrefix(id, "CN=")
			cert, err = ca.CertifySubject(pub, utf8Subject(t, cn), []string{cn}, extra...)
		} else {
			cert, err = ca.Certify(pub, []string{id}, extra...)
		}
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	cr := &testCreds{ca: ca.Cert, issuer: ca}
	ck := ike.GenKey(t, a.charonKey)
	ssID, slID := ids(a)
	cr.charon = issue(ssID, ck.Public())
	if cr.caFile, cr.charonCert, err = c.WriteCredentials(ca.Cert, cr.charon, ck); err != nil {
		t.Fatal(err)
	}
	// sluice's key goes into the soft engine; AUTH is signed through it.
	eng := soft.New()
	key, err := eng.NewPrivateKey(ike.GenKey(t, a.sluiceKey))
	if err != nil {
		t.Fatal(err)
	}
	if cr.signer, err = cryptodev.NewSigner(eng, key); err != nil {
		t.Fatal(err)
	}
	cr.sluiceCert = issue(slID, cr.signer.Public())
	return cr
}

// certAuth makes both sides authenticate with certificates from one test
// CA: sluice with a key of kind sluiceKey held by cryptodev's soft engine
// and signing with method (0: RFC 7427 when possible), charon with a key
// of kind charonKey.
type certAuth struct {
	sluiceKey, charonKey string
	method               ike.AuthMethod
	// pad, if set, pads each end-entity certificate with an extension of
	// that many bytes (IKE fragmentation).
	pad int
	// dn identifies both sides by distinguished names (ssDN, slDN), the
	// subjects of their certificates.
	dn bool
}

// bed is one interop test bed: charon in namespace "ss", sluice's
// Endpoint in "sl", and what the Endpoint reported.
type bed struct {
	ctx                  context.Context
	c                    *lab.Charon
	ssNS, slNS           *lab.Netns
	swconf               string
	ep                   *ike.Endpoint
	tr                   *ike.UDPTransport
	cfg                  ike.Config // ep's, after tweak
	creds                *testCreds // with certificates
	mu                   sync.Mutex
	established, deleted []*ike.ChildSA
	dead                 []string
}

func (b *bed) counts() (est, del int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.established), len(b.deleted)
}

// newBed builds the namespaces, starts charon with the connection
// (PSK, or certificates with cert) and sluice's Endpoint; tweak, if set,
// adjusts sluice's peer and configuration first.
func newBed(t *testing.T, ikeProps, espProps string, cert *certAuth, tweak func(*ike.Peer, *ike.Config)) *bed {
	t.Helper()
	return newBedVars(t, ikeProps, espProps, cert, tweak, nil)
}

// newBedVars is newBed with more variables for charon's swanctl.conf and
// strongswan.conf templates (LocalTS2 and RemoteTS2: a second child;
// FragSize: charon's fragment_size; Template and ConfTemplate: other
// swanctl.conf and strongswan.conf templates).
func newBedVars(t *testing.T, ikeProps, espProps string, cert *certAuth, tweak func(*ike.Peer, *ike.Config), extra map[string]string) *bed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	l := lab.NewForTest(t, nil)
	dir, err := l.Dir()
	if err != nil {
		t.Fatal(err)
	}
	ssNS, err := l.NewNetns(ctx, "ss")
	if err != nil {
		t.Fatal(err)
	}
	slNS, err := l.NewNetns(ctx, "sl")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Veth(ssNS, "wan0", slNS, "wan0"); err != nil {
		t.Fatal(err)
	}
	if err := ssNS.AddAddr("wan0", ssWAN); err != nil {
		t.Fatal(err)
	}
	if err := slNS.AddAddr("wan0", slWAN); err != nil {
		t.Fatal(err)
	}
	// charon routes its side of the tunnel from an address in its local
	// traffic selector, and refuses the Child SA without one.
	if err := ssNS.AddAddr("lo", netip.PrefixFrom(ssSite.Addr().Next(), 32)); err != nil {
		t.Fatal(err)
	}

	// 1. charon.
	psk := make([]byte, 16)
	rand.Read(psk)
	pskHex := hex.EncodeToString(psk)
	c := l.NewCharon(ssNS, dir)
	lab.LogOnFailure(t, "charon log", c.Log(), 80)
	confVars := map[string]string{"Vici": c.Vici(), "Log": c.Log()}
	for k, v := range extra {
		confVars[k] = v
	}
	confTmpl := "testdata/strongswan/strongswan.conf.tmpl"
	if extra["ConfTemplate"] != "" { // eap: strongswan_eap_test.go's plugins
		confTmpl = extra["ConfTemplate"]
	}
	render(t, confTmpl, c.Conf(), confVars)
	swconf := filepath.Join(dir, "swanctl.conf")
	ssID, slID := ids(cert)
	vars := map[string]string{
		"Local": ssWAN.Addr().String(), "Remote": slWAN.Addr().String(),
		"LocalID": ssID, "RemoteID": slID, "LocalTS": ssSite.String(), "RemoteTS": slSite.String(),
		"IKE": ikeProps, "ESP": espProps, "PSK": pskHex,
	}
	for k, v := range extra {
		vars[k] = v
	}
	tmpl := "testdata/strongswan/swanctl.conf.tmpl"
	var creds *testCreds
	if cert != nil {
		creds = newTestCreds(t, c, cert)
		tmpl = "testdata/strongswan/swanctl-cert.conf.tmpl"
		vars["Cert"], vars["CA"] = creds.charonCert, creds.caFile
	}
	if extra["Template"] != "" { // eap: strongswan_eap_test.go's swanctl.conf
		tmpl = extra["Template"]
	}
	render(t, tmpl, swconf, vars)
	startCharon(t, ctx, c, swconf)

	// 2. sluice's endpoint in "sl".
	var conns []*net.UDPConn
	for _, port := range []uint16{500, 4500} {
		uc, err := slNS.ListenUDP(netip.AddrPortFrom(slWAN.Addr(), port))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, uc)
	}
	tr, err := ike.NewUDPTransport(conns...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	ikeP, err := ike.ParseProposals(ike.ProtoIKE, ikeProps)
	if err != nil {
		t.Fatal(err)
	}
	espP, err := ike.ParseProposals(ike.ProtoESP, espProps)
	if err != nil {
		t.Fatal(err)
	}
	peer := &ike.Peer{Name: "strongswan", Local: slWAN.Addr(), Remote: ssWAN.Addr(),
		LocalID: ike.ParseIdentity(slID), RemoteID: ike.ParseIdentity(ssID), PSK: []byte(pskHex),
		IKE: ikeP, ESP: espP, LocalTS: []netip.Prefix{slSite}, RemoteTS: []netip.Prefix{ssSite}}
	if creds != nil {
		peer.PSK = nil
		peer.Signer, peer.Certificates, peer.RemoteCAs, peer.AuthMethod = creds.signer, []*x509.Certificate{creds.sluiceCert}, []*x509.Certificate{creds.ca}, cert.method
	}
	b := &bed{ctx: ctx, c: c, ssNS: ssNS, slNS: slNS, swconf: swconf, tr: tr, creds: creds}
	cfg := ike.Config{Peers: []*ike.Peer{peer}, RetransmitTimeout: 500 * time.Millisecond, RetransmitTries: 4,
		OnChildSA:  func(c *ike.ChildSA) { b.mu.Lock(); b.established = append(b.established, c); b.mu.Unlock() },
		OnDelete:   func(c *ike.ChildSA) { b.mu.Lock(); b.deleted = append(b.deleted, c); b.mu.Unlock() },
		OnPeerDead: func(name string, _ error) { b.mu.Lock(); b.dead = append(b.dead, name); b.mu.Unlock() },
	}
	if tweak != nil {
		tweak(peer, &cfg)
	}
	b.cfg = cfg
	if b.ep, err = ike.NewEndpoint(cfg, tr); err != nil {
		t.Fatal(err)
	}
	ep := b.ep
	t.Cleanup(func() { ep.Close() })
	if os.Getenv("IKE_WRITE_SEEDS") == "1" {
		ike.SetTap(b.ep, writeSeed(t))
	}
	tr.Serve(b.ep)
	return b
}

// writeSeed returns a tap that writes each IKE message charon sends to
// testdata/fuzz/FuzzParseMessage (IKE_WRITE_SEEDS=1), named by exchange
// and content, so that the fuzz target starts from real exchanges.
func writeSeed(t *testing.T) func([]byte) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParseMessage")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return func(pkt []byte) {
		if len(pkt) >= 4 && bytes.Equal(pkt[:4], []byte{0, 0, 0, 0}) {
			pkt = pkt[4:]
		}
		h, err := ike.ParseHeader(pkt)
		if err != nil {
			return
		}
		sum := sha256.Sum256(pkt)
		dir := "req"
		if h.IsResponse() {
			dir = "resp"
		}
		name := fmt.Sprintf("strongswan-%s-%s-%x", strings.ToLower(h.Exchange.String()), dir, sum[:6])
		data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", pkt)
		if err := os.WriteFile(filepath.Join("testdata", "fuzz", "FuzzParseMessage", name), []byte(data), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func interop(t *testing.T, sluiceInitiates bool, ikeProps, espProps string, cert *certAuth) {
	b := newBed(t, ikeProps, espProps, cert, nil)
	ctx, c, ep := b.ctx, b.c, b.ep
	var err error
	mu := &b.mu
	// 3. The negotiation.
	start := time.Now()
	var child *ike.ChildSA
	if sluiceInitiates {
		ictx, icancel := context.WithTimeout(ctx, 30*time.Second)
		child, err = ep.Initiate(ictx, "strongswan")
		icancel()
		if err != nil {
			t.Fatalf("sluice initiating: %v (stats %+v)", err, ep.Stats())
		}
	} else {
		if out, err := c.Swanctl(ctx, "--initiate", "--child", "net", "--timeout", "20"); err != nil {
			t.Fatalf("charon initiating: %v\n%s (sluice stats %+v)", err, out, ep.Stats())
		}
		err := lab.WaitFor(ctx, "sluice's Child SA", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			if len(b.established) > 0 {
				child = b.established[0]
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("IKE %s, ESP %s: established in %v; sluice in %08x out %08x, encap %v, %v <-> %v, TS %v === %v",
		ikeProps, espProps, time.Since(start).Round(time.Millisecond), child.InSPI, child.OutSPI, child.Encap,
		child.Local, child.Remote, child.LocalTS, child.RemoteTS)

	// 4. What charon logged.
	wantSuite := strings.TrimSuffix(espProps, "-ecp256")
	k := charonChild(t, ctx, c.Log(), child)
	if cert != nil {
		// charon logs how each side authenticated.
		data, _ := os.ReadFile(c.Log())
		verified := false
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "authentication of") {
				t.Logf("charon: %s", strings.TrimSpace(l[strings.Index(l, "]")+1:]))
				_, slID := ids(cert)
				verified = verified || (strings.Contains(l, "authentication of '"+slID+"' with") && strings.HasSuffix(l, "successful"))
			}
		}
		if !verified {
			t.Error("charon did not log a successful authentication of sluice's signature")
		}
	}
	checkKeys(t, child, k, sluiceInitiates, wantSuite)
	if !child.Encap || child.Remote != netip.AddrPortFrom(ssWAN.Addr(), 4500) || child.Local != netip.AddrPortFrom(slWAN.Addr(), 4500) {
		t.Errorf("encap %v %v <-> %v: charon's encap = yes should have moved both to 4500", child.Encap, child.Local, child.Remote)
	}
	if len(child.LocalTS) != 1 || child.LocalTS[0].String() != slSite.String() || len(child.RemoteTS) != 1 || child.RemoteTS[0].String() != ssSite.String() {
		t.Errorf("selectors %v === %v", child.LocalTS, child.RemoteTS)
	}

	// 5. A rekey (CREATE_CHILD_SA), from the side that initiated; with an
	// ESP group, with PFS.
	if cert == nil {
		var fresh *ike.ChildSA
		if sluiceInitiates {
			rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
			rstart := time.Now()
			fresh, err = ep.Rekey(rctx, child)
			rcancel()
			t.Logf("sluice rekeyed in %v", time.Since(rstart).Round(time.Millisecond))
			if err != nil {
				t.Fatalf("sluice rekeying: %v", err)
			}
		} else {
			if out, err := c.Swanctl(ctx, "--rekey", "--child", "net"); err != nil {
				t.Fatalf("charon rekeying: %v\n%s", err, out)
			}
			err := lab.WaitFor(ctx, "sluice to replace the Child SA", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				if len(b.established) == 2 && len(b.deleted) == 1 {
					fresh = b.established[1]
					return true, nil
				}
				return false, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		rk := charonChild(t, ctx, c.Log(), fresh)
		// Keys of a CREATE_CHILD_SA: "initiator" is whoever requested it.
		checkKeys(t, fresh, rk, sluiceInitiates, wantSuite)
		err = lab.WaitFor(ctx, "charon to delete the old Child SA", 10*time.Second, 50*time.Millisecond, func() (bool, error) {
			out, err := c.Swanctl(ctx, "--list-sas")
			return err == nil && !strings.Contains(out, fmt.Sprintf("%08x", child.InSPI)) && strings.Contains(out, fmt.Sprintf("%08x", fresh.InSPI)), err
		})
		if err != nil {
			t.Fatal(err)
		}
		if rk.proposal != k.proposal && !strings.Contains(espProps, "ecp256") {
			t.Errorf("rekeyed with %s, not %s", rk.proposal, k.proposal)
		}
		if strings.Contains(espProps, "ecp256") && !strings.Contains(rk.proposal, "ECP_256") {
			t.Errorf("the rekey used no PFS group: %s", rk.proposal)
		}
		child = fresh
	}

	// 6. Delete, from the side that initiated.
	if sluiceInitiates {
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		err := ep.Delete(dctx, child)
		dcancel()
		if err != nil {
			t.Fatalf("sluice deleting: %v", err)
		}
		err = lab.WaitFor(ctx, "charon to forget the IKE SA", 10*time.Second, 50*time.Millisecond, func() (bool, error) {
			out, err := c.Swanctl(ctx, "--list-sas")
			return err == nil && !strings.Contains(out, "interop:"), err
		})
		if err != nil {
			t.Fatal(err)
		}
	} else {
		if out, err := c.Swanctl(ctx, "--terminate", "--ike", "interop", "--timeout", "10"); err != nil {
			t.Fatalf("charon terminating: %v\n%s", err, out)
		}
		err := lab.WaitFor(ctx, "sluice to delete the Child SA", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			// The rekey already deleted one Child SA.
			return len(b.deleted) == 2 || (cert != nil && len(b.deleted) == 1), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	s := ep.Stats()
	t.Logf("sluice stats: %+v", s)
	if s.RxMalformed+s.RxIntegrityFailed+s.RxUnknownSPI+s.RxOutOfWindow+s.RxUnsupportedCrit != 0 || s.Deleted != 1 || (cert == nil && s.ChildSARekeyed != 1) {
		t.Errorf("unexpected drops or deletes: %+v", s)
	}
}

// render renders the template file tmpl with data into out.
func render(t *testing.T, tmpl, out string, data any) {
	t.Helper()
	if err := lab.RenderTemplate(tmpl, out, data); err != nil {
		t.Fatal(err)
	}
}

// startCharon starts charon and loads the swanctl configuration swconf.
func startCharon(t *testing.T, ctx context.Context, c *lab.Charon, swconf string) {
	t.Helper()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Load(ctx, swconf, 1); err != nil {
		t.Fatal(err)
	}
}

// charonKeys are one Child SA's keys and SPIs as charon logs them with
// chd = 4. "initiator" keys protect what the initiator of the exchange
// that made the Child SA sends (RFC 7296 section 2.17), whichever side
// charon is; its "_i" SPI is its inbound one.
type charonKeys struct {
	proposal       string
	spiIn, spiOut  uint32
	encI, encR     []byte
	integI, integR []byte
}

var (
	// 12[CHD] encryption initiator key => 20 bytes @ 0x7f...
	keyRE = regexp.MustCompile(`^(\d+)\[CHD\] (encryption|integrity) (initiator|responder) key => (\d+) bytes`)
	// 12[CHD]    0: D3 0A BC 28 ...
	dumpRE = regexp.MustCompile(`^(\d+)\[CHD\]\s+\d+: (.*)$`)
	// CHILD_SA net{1} established with SPIs c1a2b3c4_i 0a0b0c0d_o and TS ...
	spiRE  = regexp.MustCompile(`CHILD_SA \S+ established with SPIs ([0-9a-f]{8})_i ([0-9a-f]{8})_o`)
	propRE = regexp.MustCompile(`selected proposal: (ESP:\S+)`)
)

// charonChild waits until charon's log has the Child SA whose SPIs are
// child's, and returns its keys.
func charonChild(t *testing.T, ctx context.Context, log string, child *ike.ChildSA) *charonKeys {
	t.Helper()
	var k *charonKeys
	err := lab.WaitFor(ctx, fmt.Sprintf("charon's Child SA %08x in its log", child.OutSPI), 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		all, err := readCharonKeys(log)
		for _, c := range all {
			if c.spiIn == child.OutSPI {
				k = c
				return true, nil
			}
		}
		return false, err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("charon: %s, SPIs %08x_i %08x_o", k.proposal, k.spiIn, k.spiOut)
	return k
}

// checkKeys compares sluice's Child SA with charon's; sluiceFirst says
// sluice initiated the exchange that made it.
func checkKeys(t *testing.T, child *ike.ChildSA, k *charonKeys, sluiceFirst bool, suite string) {
	t.Helper()
	if child.OutSPI != k.spiIn || child.InSPI != k.spiOut {
		t.Errorf("SPIs: sluice in %08x out %08x, charon in %08x out %08x", child.InSPI, child.OutSPI, k.spiIn, k.spiOut)
	}
	encOut, encIn, intOut, intIn := k.encI, k.encR, k.integI, k.integR
	if !sluiceFirst {
		encOut, encIn, intOut, intIn = k.encR, k.encI, k.integR, k.integI
	}
	if len(encOut) == 0 || !bytes.Equal(child.OutKey, encOut) || !bytes.Equal(child.InKey, encIn) {
		t.Errorf("encryption keys differ:\nsluice out %x in %x\ncharon out %x in %x", child.OutKey, child.InKey, encOut, encIn)
	}
	if !bytes.Equal(child.OutAuthKey, intOut) || !bytes.Equal(child.InAuthKey, intIn) {
		t.Errorf("integrity keys differ:\nsluice out %x in %x\ncharon out %x in %x", child.OutAuthKey, child.InAuthKey, intOut, intIn)
	}
	if child.Suite != suite || child.ESN {
		t.Errorf("suite %q esn %v, want %q", child.Suite, child.ESN, suite)
	}
}

// readCharonKeys reads the Child SAs of a charon log (chd = 4) in the
// order they were established: each one's keys are logged before its
// "established with SPIs" line, by one thread.
func readCharonKeys(path string) ([]*charonKeys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var all []*charonKeys
	k := &charonKeys{}
	var (
		cur    *[]byte
		thread string
		want   int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if cur != nil {
			if m := dumpRE.FindStringSubmatch(line); m != nil && m[1] == thread {
				for _, tok := range strings.Fields(m[2]) {
					if len(*cur) == want || len(tok) != 2 {
						break
					}
					b, err := hex.DecodeString(tok)
					if err != nil {
						break
					}
					*cur = append(*cur, b[0])
				}
				if len(*cur) == want {
					cur = nil
				}
				continue
			}
		}
		if m := keyRE.FindStringSubmatch(line); m != nil {
			var dst *[]byte
			switch m[2] + " " + m[3] {
			case "encryption initiator":
				dst = &k.encI
			case "encryption responder":
				dst = &k.encR
			case "integrity initiator":
				dst = &k.integI
			default:
				dst = &k.integR
			}
			*dst = nil
			thread, cur = m[1], dst
			want, _ = strconv.Atoi(m[4])
			if want == 0 {
				cur = nil
			}
			continue
		}
		if m := propRE.FindStringSubmatch(line); m != nil {
			k.proposal = m[1]
		}
		if m := spiRE.FindStringSubmatch(line); m != nil {
			in, _ := strconv.ParseUint(m[1], 16, 32)
			out, _ := strconv.ParseUint(m[2], 16, 32)
			k.spiIn, k.spiOut = uint32(in), uint32(out)
			if len(k.encI) > 0 && len(k.encR) > 0 && cur == nil {
				all = append(all, k)
			}
			k = &charonKeys{proposal: k.proposal}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("no Child SA with keys yet (is chd = 4 set in the filelog?)")
	}
	return all, nil
}

// waitChild waits until sluice has reported n Child SAs and returns the
// last.
func (b *bed) waitChild(t *testing.T, n int, what string) *ike.ChildSA {
	t.Helper()
	var c *ike.ChildSA
	err := lab.WaitFor(b.ctx, what, 30*time.Second, 10*time.Millisecond, func() (bool, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.established) >= n {
			c = b.established[n-1]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v (stats %+v)", err, b.ep.Stats())
	}
	return c
}

// oneIKESA returns sluice's one established IKE SA.
func (b *bed) oneIKESA(t *testing.T) ike.IKESAInfo {
	t.Helper()
	var got ike.IKESAInfo
	err := lab.WaitFor(b.ctx, "sluice to hold one established IKE SA", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
		l := b.ep.IKESAs()
		if len(l) == 1 && l[0].State == "established" {
			got = l[0]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v: %+v", err, b.ep.IKESAs())
	}
	return got
}

// charonHasIKESA waits until charon lists an IKE SA with the SPIs of sa
// and no other.
func (b *bed) charonHasIKESA(t *testing.T, sa ike.IKESAInfo) {
	t.Helper()
	spis := fmt.Sprintf("%016x", sa.SPIi)
	err := lab.WaitFor(b.ctx, "charon to list IKE SA "+spis, 10*time.Second, 50*time.Millisecond, func() (bool, error) {
		out, err := b.c.Swanctl(b.ctx, "--list-sas")
		return err == nil && strings.Contains(out, spis) && strings.Count(out, "interop: #") == 1, err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStrongSwanIKERekey rekeys the IKE SA (section 2.18), by sluice and
// by charon (swanctl --rekey --ike): both must end with the one new IKE
// SA, and the Child SA, now on it, must still rekey with matching keys.
func TestStrongSwanIKERekey(t *testing.T) {
	for _, by := range []string{"sluice", "charon"} {
		t.Run("by-"+by, func(t *testing.T) {
			lab.RequireCharon(t)
			b := newBed(t, "aes256gcm16-prfsha384-ecp384", "aes128gcm16", nil, nil)
			child, err := b.ep.Initiate(b.ctx, "strongswan")
			if err != nil {
				t.Fatal(err)
			}
			before := b.oneIKESA(t)
			b.charonHasIKESA(t, before)
			if by == "sluice" {
				rctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
				err = b.ep.RekeyIKE(rctx, child)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			} else if out, err := b.c.Swanctl(b.ctx, "--rekey", "--ike", "interop"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			err = lab.WaitFor(b.ctx, "the IKE SA to be replaced", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
				l := b.ep.IKESAs()
				return len(l) == 1 && l[0].SPIi != before.SPIi && l[0].State == "established", nil
			})
			if err != nil {
				t.Fatalf("%v: %+v", err, b.ep.IKESAs())
			}
			after := b.oneIKESA(t)
			if after.Initiator != (by == "sluice") || len(after.Children) != 1 || after.Children[0] != child {
				t.Fatalf("new IKE SA %+v", after)
			}
			b.charonHasIKESA(t, after)
			// The Child SA rekeys on the new IKE SA with keys from its SK_d.
			fresh, err := b.ep.Rekey(b.ctx, child)
			if err != nil {
				t.Fatal(err)
			}
			checkKeys(t, fresh, charonChild(t, b.ctx, b.c.Log(), fresh), true, "aes128gcm16")
			if err := b.ep.Delete(b.ctx, fresh); err != nil {
				t.Fatal(err)
			}
			err = lab.WaitFor(b.ctx, "charon to forget the IKE SA", 10*time.Second, 50*time.Millisecond, func() (bool, error) {
				out, err := b.c.Swanctl(b.ctx, "--list-sas")
				return err == nil && !strings.Contains(out, "interop:"), err
			})
			if err != nil {
				t.Fatal(err)
			}
			s := b.ep.Stats()
			t.Logf("sluice stats: %+v", s)
			if s.IKESARekeyed != 1 || s.RxMalformed+s.RxIntegrityFailed+s.RxUnknownSPI+s.RxOutOfWindow != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestStrongSwanRestart kills charon (SIGKILL) under an established IKE
// SA and starts it again: sluice's liveness checks (dpd_delay) find the
// peer dead, delete its Child SA, and DPDAction restart negotiates a new
// one with the new charon.
func TestStrongSwanRestart(t *testing.T) {
	lab.RequireCharon(t)
	b := newBed(t, "aes256gcm16-prfsha384-ecp384", "aes128gcm16", nil, func(p *ike.Peer, c *ike.Config) {
		p.DPDDelay = time.Second
		p.DPDAction = ike.ActionRestart
		c.RetransmitTimeout = 300 * time.Millisecond
		c.RetransmitTries = 2
	})
	first, err := b.ep.Initiate(b.ctx, "strongswan")
	if err != nil {
		t.Fatal(err)
	}
	checkKeys(t, first, charonChild(t, b.ctx, b.c.Log(), first), true, "aes128gcm16")
	b.c.Kill()
	killed := time.Now()
	err = lab.WaitFor(b.ctx, "sluice to find charon dead", 15*time.Second, 10*time.Millisecond, func() (bool, error) {
		_, del := b.counts()
		b.mu.Lock()
		defer b.mu.Unlock()
		return del == 1 && len(b.dead) == 1, nil
	})
	if err != nil {
		t.Fatalf("%v (stats %+v)", err, b.ep.Stats())
	}
	t.Logf("charon found dead %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	startCharon(t, b.ctx, b.c, b.swconf)
	second := b.waitChild(t, 2, "sluice to re-establish with the new charon")
	t.Logf("re-established %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
	checkKeys(t, second, charonChild(t, b.ctx, b.c.Log(), second), true, "aes128gcm16")
	b.charonHasIKESA(t, b.oneIKESA(t))
	s := b.ep.Stats()
	t.Logf("sluice stats: %+v", s)
	if s.PeersDead != 1 || s.Restarts < 1 || s.LivenessChecks < 1 || s.IKESAEstablished != 2 {
		t.Errorf("stats %+v", s)
	}
}

// TestStrongSwanChildren: a connection with two children of different
// traffic selectors, the second made on the IKE SA with CREATE_CHILD_SA
// (section 1.3.1), by sluice (InitiateChild) and by charon (swanctl
// --initiate --child net2); both Child SAs are up on both sides with
// matching keys and selectors.
func TestStrongSwanChildren(t *testing.T) {
	ss2, sl2 := netip.MustParsePrefix("10.1.1.0/24"), netip.MustParsePrefix("10.2.1.0/24")
	for _, by := range []string{"sluice", "charon"} {
		t.Run("by-"+by, func(t *testing.T) {
			lab.RequireCharon(t)
			b := newBedVars(t, "aes256gcm16-prfsha384-ecp384", "aes128gcm16", nil, func(p *ike.Peer, _ *ike.Config) {
				p.ChildName = "net"
				p.Children = []ike.Child{{Name: "net2", LocalTS: []netip.Prefix{sl2}, RemoteTS: []netip.Prefix{ss2}}}
			}, map[string]string{"LocalTS2": ss2.String(), "RemoteTS2": sl2.String()})
			// charon needs an address in each local selector.
			if err := b.c.Netns().AddAddr("lo", netip.PrefixFrom(ss2.Addr().Next(), 32)); err != nil {
				t.Fatal(err)
			}
			first, err := b.ep.Initiate(b.ctx, "strongswan")
			if err != nil {
				t.Fatal(err)
			}
			checkKeys(t, first, charonChild(t, b.ctx, b.c.Log(), first), true, "aes128gcm16")
			var second *ike.ChildSA
			if by == "sluice" {
				if second, err = b.ep.InitiateChild(b.ctx, "strongswan", "net2"); err != nil {
					t.Fatalf("%v (stats %+v)", err, b.ep.Stats())
				}
			} else {
				if out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", "net2", "--timeout", "20"); err != nil {
					t.Fatalf("charon initiating net2: %v\n%s (sluice stats %+v)", err, out, b.ep.Stats())
				}
				second = b.waitChild(t, 2, "sluice to report net2")
			}
			if second.Child != "net2" || len(second.LocalTS) != 1 || len(second.RemoteTS) != 1 {
				t.Fatalf("second Child SA %+v", second)
			}
			if p, _ := second.LocalTS[0].Prefix(); p != sl2 {
				t.Errorf("local TS %v, want %v", second.LocalTS, sl2)
			}
			if p, _ := second.RemoteTS[0].Prefix(); p != ss2 {
				t.Errorf("remote TS %v, want %v", second.RemoteTS, ss2)
			}
			// Keys of a CREATE_CHILD_SA: "initiator" is whoever requested it.
			checkKeys(t, second, charonChild(t, b.ctx, b.c.Log(), second), by == "sluice", "aes128gcm16")
			sa := b.oneIKESA(t)
			if len(sa.Children) != 2 {
				t.Fatalf("sluice's IKE SA carries %d Child SAs", len(sa.Children))
			}
			err = lab.WaitFor(b.ctx, "charon to list both children", 10*time.Second, 50*time.Millisecond, func() (bool, error) {
				out, err := b.c.Swanctl(b.ctx, "--list-sas")
				return err == nil && strings.Contains(out, "net: #") && strings.Contains(out, "net2: #") &&
					strings.Contains(out, fmt.Sprintf("%08x", second.InSPI)) && strings.Count(out, "interop: #") == 1, err
			})
			if err != nil {
				t.Fatal(err)
			}
			s := b.ep.Stats()
			t.Logf("sluice stats: %+v", s)
			if s.ChildSAAdded != 1 || s.IKESAEstablished != 1 || s.RxMalformed+s.RxIntegrityFailed+s.RxUnknownSPI+s.RxOutOfWindow != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestStrongSwanFragmentation authenticates with certificates padded to
// about 3 kB, so that IKE_AUTH does not fit sluice's default fragment
// size (1232) nor charon's fragment_size (600): both send IKE_AUTH in
// fragments (RFC 7383), both reassemble, and the negotiation completes
// with matching keys, sluice initiating and responding.
func TestStrongSwanFragmentation(t *testing.T) {
	for _, role := range []string{"initiator", "responder"} {
		t.Run("sluice-"+role, func(t *testing.T) {
			lab.RequireCharon(t)
			b := newBedVars(t, "aes256gcm16-prfsha384-ecp384", "aes128gcm16", &certAuth{sluiceKey: "rsa", charonKey: "p384", pad: 3000}, nil,
				map[string]string{"FragSize": "600"})
			var child *ike.ChildSA
			if role == "initiator" {
				var err error
				if child, err = b.ep.Initiate(b.ctx, "strongswan"); err != nil {
					t.Fatalf("%v (stats %+v)", err, b.ep.Stats())
				}
			} else {
				if out, err := b.c.Swanctl(b.ctx, "--initiate", "--child", "net", "--timeout", "20"); err != nil {
					t.Fatalf("charon initiating: %v\n%s (sluice stats %+v)", err, out, b.ep.Stats())
				}
				child = b.waitChild(t, 1, "sluice's Child SA")
			}
			checkKeys(t, child, charonChild(t, b.ctx, b.c.Log(), child), role == "initiator", "aes128gcm16")
			data, err := os.ReadFile(b.c.Log())
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), "reassembled fragmented IKE message") {
				t.Error("charon logged no reassembled fragmented IKE message")
			}
			s := b.ep.Stats()
			t.Logf("sluice stats: %+v", s)
			if s.TxFragments < 2 || s.RxFragments < 2 || s.RxReassembled != 1 || s.RxIntegrityFailed+s.RxMalformed+s.RxFragInvalid+s.RxFragDuplicate != 0 {
				t.Errorf("IKE_AUTH did not go in fragments both ways: %+v", s)
			}
		})
	}
}
