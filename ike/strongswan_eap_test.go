package ike_test

// sluice as the EAP server of IKEv2 (RFC 7296 section 2.16) opposite
// strongSwan 5.9.8's charon as the road warrior:
//
//  1. The bed of strongswan_test.go (namespaces "ss" and "sl", certificates
//     from one test CA), with charon's strongswan-eap.conf.tmpl (plugins
//     eap-identity, eap-mschapv2 with gcrypt's MD4 and DES, eap-tls) and
//     swanctl-eap.conf.tmpl (local auth = eap-mschapv2 or eap-tls, remote
//     auth = pubkey: sluice signs with its certificate).
//  2. charon initiates: IKE_AUTH without AUTH, sluice answers with its
//     certificate, AUTH and EAP-Identity, the method's rounds follow, and
//     after EAP-Success both AUTH payloads use the MSK.
//  3. The Child SA must carry the keys charon logged; a wrong password
//     gets AUTHENTICATION_FAILED and no Child SA, sluice unharmed.
//
// EAP-TLS runs TLS 1.2: 5.9.8's libtls offers no more by default, and with
// tls.version_max = 1.3 its eap-tls does not know RFC 9190's commitment
// message (strongSwan added it in 5.9.10), so it stalls after the
// handshake. sluice's TLS 1.3 side is tested against crypto/tls (package
// eap, TestTLSSession).

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/ike/eap"
	"github.com/sluicegw/sluice/internal/lab"
)

func TestStrongSwanEAP(t *testing.T) {
	const ikeProps, espProps = "aes256gcm16-prfsha384-ecp384", "aes128gcm16"
	for _, c := range []struct {
		name, auth string
		password   string // charon's; sluice knows "carol's pw"
		wantChild  bool
		wantInLog  string
		pad        int  // certificate padding: EAP-TLS fragments both ways
		revoked    bool // sluice's CRL lists charon's certificate
	}{
		{name: "eap-mschapv2", auth: "eap-mschapv2", password: "carol's pw", wantChild: true,
			wantInLog: "EAP method EAP_MSCHAPV2 succeeded, MSK established"},
		{name: "eap-mschapv2-wrong-password", auth: "eap-mschapv2", password: "not carol's",
			wantInLog: "received AUTHENTICATION_FAILED notify error"},
		{name: "eap-tls", auth: "eap-tls", wantChild: true,
			wantInLog: "EAP method EAP_TLS succeeded, MSK established"},
		{name: "eap-tls-fragmented", auth: "eap-tls", wantChild: true, pad: 1500,
			wantInLog: "EAP method EAP_TLS succeeded, MSK established"},
		{name: "eap-tls-revoked", auth: "eap-tls", revoked: true,
			wantInLog: "received AUTHENTICATION_FAILED notify error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lab.RequireCharon(t)
			cert := &certAuth{sluiceKey: "p256", charonKey: "p256", pad: c.pad}
			vars := map[string]string{
				"Template":     "testdata/strongswan/swanctl-eap.conf.tmpl",
				"ConfTemplate": "testdata/strongswan/strongswan-eap.conf.tmpl",
				"EAPAuth":      c.auth,
			}
			if c.auth == "eap-mschapv2" {
				vars["EAPID"], vars["Password"] = "carol", c.password
			} else {
				vars["ClientCert"] = "charon.pem"
			}
			b := newBedVars(t, ikeProps, espProps, cert, func(p *ike.Peer, _ *ike.Config) {
				e := &eap.Config{}
				switch c.auth {
				case "eap-mschapv2":
					// A road warrior's connection: any IDi (remote id
					// %any); EAP proves the user. A remote id would have
					// to be the user EAP proves.
					p.RemoteID = ike.Identity{}
					e.Methods = []eap.Type{eap.TypeMSCHAPv2}
					e.Password = func(id string) ([]byte, bool) { return []byte("carol's pw"), id == "carol" }
				case "eap-tls":
					pool := x509.NewCertPool()
					pool.AddCert(p.RemoteCAs[0])
					e.Methods = []eap.Type{eap.TypeTLS}
					e.TLS = &tls.Config{ClientCAs: pool, Certificates: []tls.Certificate{{
						Certificate: [][]byte{p.Certificates[0].Raw}, PrivateKey: p.Signer, Leaf: p.Certificates[0]}}}
				}
				p.EAP = e
			}, vars)
			if c.revoked {
				now := time.Now()
				der, err := b.creds.issuer.CRL(now.Unix(), now.Add(-time.Minute), now.Add(time.Hour), b.creds.charon)
				if err != nil {
					t.Fatal(err)
				}
				crls, err := ike.ParseCRLs(der)
				if err != nil {
					t.Fatal(err)
				}
				p := *b.cfg.Peers[0]
				p.CRLs = crls
				if err := b.ep.SetPeers([]*ike.Peer{&p}); err != nil {
					t.Fatal(err)
				}
			}
			ctx, c2 := b.ctx, b.c
			start := time.Now()
			out, err := c2.Swanctl(ctx, "--initiate", "--child", "net", "--timeout", "20")
			if !c.wantChild {
				if err == nil {
					t.Fatalf("charon's initiate succeeded with a wrong password:\n%s", out)
				}
				if err := lab.WaitFor(ctx, "charon to log "+c.wantInLog, 10*time.Second, 20*time.Millisecond, func() (bool, error) {
					data, err := os.ReadFile(c2.Log())
					return strings.Contains(string(data), c.wantInLog), err
				}); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out, "AUTHENTICATION_FAILED") {
					data, _ := os.ReadFile(c2.Log())
					if !strings.Contains(string(data), "AUTHENTICATION_FAILED") {
						t.Errorf("no AUTHENTICATION_FAILED in swanctl's output or charon's log")
					}
				}
				s := b.ep.Stats()
				if est, _ := b.counts(); est != 0 || s.AuthFailed == 0 {
					t.Fatalf("wrong password: %d Child SAs, stats %+v", est, s)
				}
				t.Logf("refused in %v; sluice stats %+v", time.Since(start).Round(time.Millisecond), s)
				return
			}
			if err != nil {
				t.Fatalf("charon initiating: %v\n%s (sluice stats %+v)", err, out, b.ep.Stats())
			}
			child := b.waitChild(t, 1, "sluice's Child SA")
			t.Logf("%s: established in %v", c.auth, time.Since(start).Round(time.Millisecond))
			// The IKE SA's remote identity is what EAP proved, not charon's
			// IDi (which EAP does not authenticate).
			wantID := "carol"
			if c.auth == "eap-tls" {
				wantID = ike.Identity{Type: ike.IDDERASN1, Data: b.creds.charon.RawSubject}.String()
			}
			if l := b.ep.IKESAs(); len(l) != 1 || l[0].RemoteID != wantID {
				t.Errorf("IKE SAs %+v, want one with remote identity %q", l, wantID)
			}
			data, _ := os.ReadFile(c2.Log())
			if !strings.Contains(string(data), c.wantInLog) {
				t.Errorf("charon's log lacks %q", c.wantInLog)
			}
			var frags int
			for _, l := range strings.Split(string(data), "\n") {
				if strings.Contains(l, "negotiated TLS") || strings.Contains(l, "authentication of") {
					t.Logf("charon: %s", strings.TrimSpace(l[strings.Index(l, "]")+1:]))
				}
				if strings.Contains(l, "EAP_TLS first fragment") || strings.Contains(l, "EAP_TLS further fragment") {
					frags++
				}
			}
			if c.pad > 0 && frags == 0 {
				t.Errorf("charon sent no EAP-TLS fragments with padded certificates")
			}
			checkKeys(t, child, charonChild(t, ctx, c2.Log(), child), false, espProps)

			// charon deletes; sluice forgets.
			if out, err := c2.Swanctl(ctx, "--terminate", "--ike", "interop", "--timeout", "10"); err != nil {
				t.Fatalf("charon terminating: %v\n%s", err, out)
			}
			if err := lab.WaitFor(ctx, "sluice to delete the Child SA", 10*time.Second, 10*time.Millisecond, func() (bool, error) {
				_, del := b.counts()
				return del == 1, nil
			}); err != nil {
				t.Fatal(err)
			}
			s := b.ep.Stats()
			if s.RxMalformed+s.RxIntegrityFailed+s.AuthFailed != 0 {
				t.Errorf("unexpected drops or failures: %+v", s)
			}
		})
	}
}
