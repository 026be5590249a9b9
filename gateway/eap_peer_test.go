package gateway

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/gateway/certgen"
	"github.com/sluicegw/sluice/ike/eap"
)

// [connection.remote] auth = "eap-*" with type = "eap" secrets and
// cacerts becomes ike.Peer.EAP: the methods, the eap_id, the passwords by
// identity and the EAP-TLS server's certificate and client CAs.
func TestEAPPeer(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA("eap test CA")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.IssueFiles(dir, "gw", false, "gw.example"); err != nil {
		t.Fatal(err)
	}
	doc := func(auth, eapID string) string {
		return `[tun]
addresses = ["10.1.0.1/24"]

[[connection]]
name = "rw"
local_addrs = ["192.0.2.1"]
remote_addrs = ["%any"]
  [connection.local]
  auth = "pubkey"
  certs = ["gw.pem"]
  [connection.remote]
  auth = "` + auth + `"
  ` + eapID + `
  cacerts = ["ca.pem"]
  [[connection.children]]
  name = "rw-net"
  local_ts = ["10.1.0.0/24"]
  remote_ts = ["10.3.0.0/24"]

[[secret]]
type = "eap"
ids = ["carol", "dave"]
secret = "carol's pw"

[[secret]]
type = "private"
file = "gw.key"
`
	}
	for _, c := range []struct {
		auth, eapID string
		methods     []eap.Type
		identity    string
	}{
		{"eap-mschapv2", `eap_id = "%any"`, []eap.Type{eap.TypeMSCHAPv2}, ""},
		{"eap-tls", `eap_id = "carol"`, []eap.Type{eap.TypeTLS}, "carol"},
		{"eap", "", []eap.Type{eap.TypeMSCHAPv2, eap.TypeTLS}, ""},
	} {
		g, err := config.ParseGateway(filepath.Join(dir, "gw.toml"), []byte(doc(c.auth, c.eapID)))
		if err != nil {
			t.Fatalf("%s: %v", c.auth, err)
		}
		p, _, _, err := ikeCredentials(g, 0, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.auth, err)
		}
		if p.EAP != nil {
			t.Fatalf("%s: ikeCredentials set EAP already", c.auth)
		}
		if err := eapPeer(g, 0, p); err != nil {
			t.Fatalf("%s: %v", c.auth, err)
		}
		e := p.EAP
		if e == nil || !slices.Equal(e.Methods, c.methods) || e.Identity != c.identity {
			t.Fatalf("%s: EAP %+v, want methods %v identity %q", c.auth, e, c.methods, c.identity)
		}
		if _, err := eap.NewServer(e); err != nil {
			t.Fatalf("%s: %v", c.auth, err)
		}
		if e.Password != nil {
			if pw, ok := e.Password("dave"); !ok || !bytes.Equal(pw, []byte("carol's pw")) {
				t.Errorf("%s: password of dave %q %v", c.auth, pw, ok)
			}
			if _, ok := e.Password("mallory"); ok {
				t.Errorf("%s: mallory has a password", c.auth)
			}
		}
		// A reload keeps the peer only with the same passwords and CAs.
		again, _, _, _ := ikeCredentials(g, 0, nil)
		if err := eapPeer(g, 0, again); err != nil || !sameCredentials(p, again) {
			t.Errorf("%s: the same configuration: err %v, same %v", c.auth, err, sameCredentials(p, again))
		}
		g.Secrets[0].Data = []byte("new pw")
		changed, _, _, _ := ikeCredentials(g, 0, nil)
		if err := eapPeer(g, 0, changed); err != nil || sameCredentials(p, changed) == slices.Contains(c.methods, eap.TypeMSCHAPv2) {
			t.Errorf("%s: a changed password: err %v, same %v", c.auth, err, sameCredentials(p, changed))
		}
		if slices.Contains(c.methods, eap.TypeTLS) {
			tc := e.TLS
			if tc == nil || len(tc.Certificates) != 1 || tc.Certificates[0].Leaf.DNSNames[0] != "gw.example" || tc.ClientCAs == nil {
				t.Fatalf("%s: TLS %+v", c.auth, tc)
			}
			// The key is the peer's Signer, bound when ikePeer sets it.
			if _, err := tc.Certificates[0].PrivateKey.(peerSigner).Sign(nil, make([]byte, 32), nil); err == nil || !strings.Contains(err.Error(), "no private key") {
				t.Errorf("%s: signing without a Signer: %v", c.auth, err)
			}
		}
	}
}
