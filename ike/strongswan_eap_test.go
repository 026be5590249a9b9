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
	"io"
	"log/slog"
	"os"
	"strconv"
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
		// sluiceEAPID is sluice's eap_id (its peer's EAP.Identity);
		// charonID charon's IDi, and sluice's remote id, when charon
		// presents its certificate (which names ssIDStr) under another
		// IKE identity.
		sluiceEAPID, charonID string
		wantWarn              []string // in sluice's one WARN line
	}{
		{name: "eap-mschapv2", auth: "eap-mschapv2", password: "carol's pw", wantChild: true,
			wantInLog: "EAP method EAP_MSCHAPV2 succeeded, MSK established"},
		{name: "eap-mschapv2-wrong-password", auth: "eap-mschapv2", password: "not carol's",
			wantInLog: "received AUTHENTICATION_FAILED notify error",
			wantWarn:  []string{"EAP failed; AUTHENTICATION_FAILED", "method=EAP-MSCHAPv2", "eap_id=carol", "wrong password for"}},
		{name: "eap-tls", auth: "eap-tls", wantChild: true,
			wantInLog: "EAP method EAP_TLS succeeded, MSK established"},
		{name: "eap-tls-fragmented", auth: "eap-tls", wantChild: true, pad: 1500,
			wantInLog: "EAP method EAP_TLS succeeded, MSK established"},
		{name: "eap-tls-revoked", auth: "eap-tls", revoked: true,
			wantInLog: "received AUTHENTICATION_FAILED notify error",
			wantWarn:  []string{"EAP failed; AUTHENTICATION_FAILED", "method=EAP-TLS", "cert=", "CN=" + ssIDStr + `"`, "is revoked since"}},
		// eap_id names the user whose certificate must be presented.
		{name: "eap-tls-eap-id", auth: "eap-tls", sluiceEAPID: ssIDStr, wantChild: true,
			wantInLog: "EAP method EAP_TLS succeeded, MSK established"},
		// Another user's certificate from the same CA: refused, whether
		// the user is named by eap_id or, with eap_id = %any, by the
		// remote id that chose the connection (charon's IDi says alice,
		// its certificate is another user's).
		{name: "eap-tls-eap-id-other-user", auth: "eap-tls", sluiceEAPID: "alice@interop.sluice",
			wantInLog: "received AUTHENTICATION_FAILED notify error",
			wantWarn:  []string{"EAP failed; AUTHENTICATION_FAILED", "eap_id=alice@interop.sluice", "cert=", "CN=" + ssIDStr + `"`, "does not name alice@interop.sluice (eap_id)"}},
		{name: "eap-tls-remote-id-other-user", auth: "eap-tls", charonID: "alice@interop.sluice",
			wantInLog: "received AUTHENTICATION_FAILED notify error",
			wantWarn:  []string{"EAP failed; AUTHENTICATION_FAILED", "remote_id=alice@interop.sluice", "cert=", "CN=" + ssIDStr + `"`, "does not name alice@interop.sluice (the connection's remote id)"}},
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
				if c.charonID != "" {
					// charon's IDi is charonID; it finds its certificate
					// by its EAP identity.
					vars["LocalID"], vars["EAPID"] = c.charonID, ssIDStr
				}
			}
			var gwLog ike.LogBuffer
			b := newBedVars(t, ikeProps, espProps, cert, func(p *ike.Peer, cfg *ike.Config) {
				cfg.Log = newTextLog(&gwLog)
				if c.charonID != "" {
					p.RemoteID = ike.ParseIdentity(c.charonID)
				}
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
					e.Identity = c.sluiceEAPID
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
					t.Fatalf("charon's initiate succeeded where sluice must refuse it:\n%s", out)
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
				// One WARN line says why, and who tried.
				if warns := gwLog.Lines("level=WARN"); len(warns) != 1 || len(gwLog.Lines(append([]string{"level=WARN"}, c.wantWarn...)...)) != 1 {
					t.Errorf("sluice's WARN lines %q, want one with %q", warns, c.wantWarn)
				} else {
					t.Logf("sluice: %s", warns[0])
				}
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
			// sluice logs the identity EAP proved.
			if l := gwLog.Lines("EAP succeeded", "remote_id="+strconv.Quote(wantID)); len(l) != 1 &&
				len(gwLog.Lines("EAP succeeded", "remote_id="+wantID)) != 1 {
				t.Errorf("sluice's log lacks the success line with remote_id=%s:\n%s", wantID, gwLog.String())
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

// newTextLog logs at INFO and above into w.
func newTextLog(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
