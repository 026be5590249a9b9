package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// ikeBase is a valid gateway with one IKE connection and nothing else.
const ikeTun = "[tun]\naddresses = [\"10.1.0.1/24\"]\n"

func ikeConn(extra string) string {
	return `[[connection]]
name = "b"
local_addrs = ["192.0.2.1"]
remote_addrs = ["192.0.2.2"]
` + extra + `
  [connection.local]
  auth = "psk"
  id = "a.example"
  [connection.remote]
  auth = "psk"
  id = "b.example"
  [[connection.children]]
  name = "b-net"
  local_ts = ["10.1.0.0/24"]
  remote_ts = ["10.2.0.0/24"]
`
}

const ikeSecret = "[[secret]]\ntype = \"ike\"\nids = [\"a.example\", \"b.example\"]\nsecret = \"0x00112233445566778899aabbccddeeff\"\n"

// TestIKEExample loads examples/ike-gateway.toml: one connection with
// every key, its child and a PSK.
func TestIKEExample(t *testing.T) {
	g, err := LoadGateway("../examples/ike-gateway.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Tunnels) != 0 || len(g.Connections) != 1 || g.TLSOnly() || !g.IKEOnly() {
		t.Fatalf("got %+v", g)
	}
	c := g.Connections[0]
	if c.Name != "site-b" || c.Local != addr("192.0.2.1") || c.Remote != addr("192.0.2.2") || len(c.IKE) != 2 ||
		c.DPDDelay != 30*time.Second || c.RekeyTime != 4*time.Hour || c.OverTime != 24*time.Minute || c.Encap {
		t.Errorf("connection %+v", c)
	}
	if c.LocalAuth.Auth != AuthPSK || c.LocalID() != "gw-a.example" || c.RemoteAuth.ID != "gw-b.example" {
		t.Errorf("auth %+v %+v", c.LocalAuth, c.RemoteAuth)
	}
	ch := c.Children[0]
	if ch.Name != "site-b-net" || ch.StartAction != StartStart || len(ch.ESP) != 4 || ch.ESPProposals != DefaultESPProposals || c.Proposals != DefaultIKEProposals || ch.RekeyTime != time.Hour || ch.LifeTime != 66*time.Minute ||
		!slices.Equal(ch.RemoteTS, []netip.Prefix{pfx("10.2.0.0/24")}) {
		t.Errorf("child %+v", ch)
	}
	if psk := g.PSK(c.LocalID(), c.RemoteAuth.ID); string(psk) != "example only, generate your own" {
		t.Errorf("psk %q", psk)
	}
	// IKE needs the UDP socket; a connection without encap may send
	// ESP as IP protocol 50.
	if g.UDP == nil || g.RawESP == nil {
		t.Errorf("sockets udp %v rawesp %v", g.UDP, g.RawESP)
	}
}

func TestIKEDefaults(t *testing.T) {
	g, err := ParseGateway("gw.toml", []byte(ikeTun+ikeConn("encap = true")+ikeSecret))
	if err != nil {
		t.Fatal(err)
	}
	c := g.Connections[0]
	if c.Proposals != DefaultIKEProposals || c.RekeyTime != DefaultIKERekeyTime || c.DPDDelay != 0 || !c.Encap {
		t.Errorf("connection %+v", c)
	}
	ch := c.Children[0]
	if ch.ESPProposals != DefaultESPProposals || ch.StartAction != StartNone || ch.RekeyTime != DefaultChildRekeyTime ||
		ch.LifeTime != DefaultChildRekeyTime*11/10 {
		t.Errorf("child %+v", ch)
	}
	if g.RawESP != nil || g.UDP == nil || g.UDP.Listen != netip.MustParseAddrPort("0.0.0.0:4500") {
		t.Errorf("encap = true needs only [udp]: %+v %+v", g.UDP, g.RawESP)
	}
	// %any, and a PSK without ids.
	doc := strings.Replace(ikeConn(""), `remote_addrs = ["192.0.2.2"]`, `remote_addrs = ["%any"]`, 1)
	g, err = ParseGateway("gw.toml", []byte(ikeTun+doc+"[[secret]]\ntype = \"ike\"\nsecret = \"0sAAECAwQFBgcICQoLDA0ODw==\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Connections[0].Remote.IsValid() || len(g.PSK("a.example", "x")) != 16 || g.IKE != (IKEOptions{Port: DefaultIKEPort}) {
		t.Errorf("%+v %+v", g.Connections[0], g.IKE)
	}
	g, err = ParseGateway("gw.toml", []byte("[ike]\nport = 1500\nretransmit_timeout = \"250ms\"\nretransmit_tries = 2\nkeep_alive = \"2s\"\n"+ikeTun+ikeConn("")+ikeSecret))
	if err != nil {
		t.Fatal(err)
	}
	if g.IKE != (IKEOptions{Port: 1500, RetransmitTimeout: 250 * time.Millisecond, RetransmitTries: 2, KeepAlive: 2 * time.Second}) {
		t.Errorf("[ike] %+v", g.IKE)
	}
	// keep_alive = "0s" turns NAT-keepalives off.
	g, err = ParseGateway("gw.toml", []byte("[ike]\nkeep_alive = \"0s\"\n"+ikeTun+ikeConn("")+ikeSecret))
	if err != nil {
		t.Fatal(err)
	}
	if g.IKE.KeepAlive >= 0 {
		t.Errorf("keep_alive = \"0s\": %+v", g.IKE)
	}
	// Beside a static tunnel.
	if _, err := ParseGateway("gw.toml", []byte(tun1+sas1+strings.Replace(ikeConn(""), "10.2.0.0/24", "10.9.0.0/24", 1)+ikeSecret)); err != nil {
		t.Fatal(err)
	}
}

func TestIKEErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []wantErr
	}{
		{"ike port", "[ike]\nport = 0\n" + ikeConn("") + ikeSecret, []wantErr{{2, "ike.port", "port 0 out of range (want 1..65535"}}},
		{"ike key", "[ike]\nretransmit_base = 1.8\n" + ikeConn("") + ikeSecret, []wantErr{{2, "ike.retransmit_base", "unknown key (valid: port, retransmit_timeout, retransmit_tries, max_child_sas, block_threshold, keep_alive)"}}},
		{"keep_alive short", "[ike]\nkeep_alive = \"500ms\"\n" + ikeConn("") + ikeSecret, []wantErr{{2, "ike.keep_alive", `keep_alive "500ms" out of range (want "0s" for none, or 1s..1h0m0s; default 20s)`}}},
		{"keep_alive int", "[ike]\nkeep_alive = 20\n" + ikeConn("") + ikeSecret, []wantErr{{2, "ike.keep_alive", `want a duration string such as "20s", got the integer 20`}}},
		{"keep_alive bad", "[ike]\nkeep_alive = \"soon\"\n" + ikeConn("") + ikeSecret, []wantErr{{2, "ike.keep_alive", `invalid duration "soon"`}}},
		{"version", ikeConn("version = 1") + ikeSecret, []wantErr{{5, "connection[1].version", "IKE version 1 out of range (want 2"}}},
		{"unknown key", ikeConn("mobike_v2 = true") + ikeSecret, []wantErr{{5, "connection[1].mobike_v2", "unknown key (valid: name, version"}}},
		{"bad proposal", ikeConn(`proposals = "aes256gcm16-prfsha384-ecp999"`) + ikeSecret, []wantErr{{5, "connection[1].proposals", "want strongSwan IKE proposals"}}},
		{"bad esp", strings.Replace(ikeConn(""), `remote_ts = ["10.2.0.0/24"]`, "remote_ts = [\"10.2.0.0/24\"]\n  esp_proposals = \"des\"", 1) + ikeSecret,
			[]wantErr{{16, "connection[1].children[1].esp_proposals", `des is not supported (ENCR_DES: MUST NOT (RFC 8221, RFC 8247)) (want strongSwan ESP proposals`}}},
		{"unknown keyword", ikeConn(`proposals = "aes256-sha256-modp2049"`) + ikeSecret, []wantErr{{5, "connection[1].proposals", `unknown or unsupported algorithm keyword "modp2049" (want strongSwan IKE proposals`}}},
		{"3des", ikeConn(`proposals = "3des-sha1-modp1024"`) + ikeSecret, []wantErr{{5, "connection[1].proposals", `3des is not supported (ENCR_3DES: `}}},
		{"esp sha1", strings.Replace(ikeConn(""), `remote_ts = ["10.2.0.0/24"]`, "remote_ts = [\"10.2.0.0/24\"]\n  esp_proposals = \"aes256-sha1\"", 1) + ikeSecret,
			[]wantErr{{16, "connection[1].children[1].esp_proposals", `sha1 is for IKE proposals only: the ESP data plane does not implement it`}}},
		{"prfsha1 in esp", strings.Replace(ikeConn(""), `remote_ts = ["10.2.0.0/24"]`, "remote_ts = [\"10.2.0.0/24\"]\n  esp_proposals = \"aes256gcm16-prfsha1\"", 1) + ikeSecret,
			[]wantErr{{16, "connection[1].children[1].esp_proposals", `an ESP proposal takes no PRF`}}},
		{"two addrs", strings.Replace(ikeConn(""), `["192.0.2.1"]`, `["192.0.2.1", "192.0.2.9"]`, 1) + ikeSecret,
			[]wantErr{{3, "connection[1].local_addrs[2]", "one address only"}}},
		{"remote family", strings.Replace(ikeConn(""), `["192.0.2.2"]`, `["2001:db8::2"]`, 1) + ikeSecret,
			[]wantErr{{4, "connection[1].remote_addrs", "address family"}}},
		{"no psk", ikeConn(""), []wantErr{{7, "connection[1].local.auth", `no [[secret]] with type = "ike" has ids "a.example" or "b.example"`},
			{10, "connection[1].remote.auth", "no [[secret]]"}}},
		{"short psk", ikeConn("") + "[[secret]]\ntype = \"ike\"\nsecret = \"short\"\n", []wantErr{{7, "connection[1].local.auth", "no [[secret]]"},
			{10, "connection[1].remote.auth", "no [[secret]]"}, {18, "secret[1].secret", "too short"}}},
		{"auth", strings.Replace(ikeConn(""), `auth = "psk"`, `auth = "xauth"`, 1) + ikeSecret, []wantErr{{7, "connection[1].local.auth", `unknown authentication "xauth"`}}},
		{"local eap", strings.Replace(ikeConn(""), `auth = "psk"`, `auth = "eap"`, 1) + ikeSecret, []wantErr{{7, "connection[1].local.auth", `auth = "eap" belongs in [connection.remote]: sluice is an EAP server`}}},
		{"pubkey no certs", strings.Replace(ikeConn(""), `auth = "psk"`, `auth = "pubkey"`, 1) + ikeSecret,
			[]wantErr{{6, "connection[1].local.certs", `auth = "pubkey" needs our certificate`}}},
		{"pubkey no key", strings.Replace(ikeConn(""), `auth = "psk"`, "auth = \"pubkey\"\n  certs = [\"a.pem\"]", 1) + ikeSecret,
			[]wantErr{{7, "connection[1].local.auth", `no [[secret]] with type = "private"`}}},
		{"remote pubkey", strings.Replace(ikeConn(""), "auth = \"psk\"\n  id = \"b.example\"", "auth = \"pubkey\"", 1) + ikeSecret,
			[]wantErr{{9, "connection[1].remote.cacerts", "needs what the peer's certificate must chain to"}}},
		{"start action", strings.Replace(ikeConn(""), `name = "b-net"`, "name = \"b-net\"\n  start_action = \"route\"", 1) + ikeSecret,
			[]wantErr{{14, "connection[1].children[1].start_action", `unknown start action "route"`}}},
		{"life time", strings.Replace(ikeConn(""), `name = "b-net"`, "name = \"b-net\"\n  rekey_time = \"1h\"\n  life_time = \"30m\"", 1) + ikeSecret,
			[]wantErr{{15, "connection[1].children[1].life_time", "not after rekey_time"}}},
		{"no children", strings.Split(ikeConn(""), "  [[connection.children]]")[0] + ikeSecret, []wantErr{{1, "connection[1].children", "missing required key"}}},
		{"child name clash", tun1 + sas1 + strings.Replace(strings.Replace(ikeConn(""), `name = "b-net"`, `name = "t"`, 1), "10.2.0.0/24", "10.9.0.0/24", 1) + ikeSecret,
			[]wantErr{{0, "connection[1].children[1].name", "names are unique among children and [[tunnel]]s"}}},
		{"route overlap", tun1 + sas1 + strings.Replace(ikeConn(""), `remote_ts = ["10.2.0.0/24"]`, `remote_ts = ["10.2.0.0/16"]`, 1) + ikeSecret,
			[]wantErr{{0, "connection[1].children[1].remote_ts[1]", "overlaps"}}},
		{"udp listen", "[udp]\nlisten = \"192.0.2.9:4500\"\n" + ikeConn("") + ikeSecret, []wantErr{{5, "connection[1].local_addrs", "is not udp.listen 192.0.2.9"}}},
		{"secret type", ikeConn("") + ikeSecret + "[[secret]]\ntype = \"rsa\"\n", []wantErr{{21, "secret[2].type", `unknown secret type "rsa"`}}},
		{"duplicate connection", ikeConn("") + strings.Replace(ikeConn(""), `"b-net"`, `"c-net"`, 1) + ikeSecret,
			[]wantErr{{0, "connection[2].name", "duplicate connection name"}, {0, "connection[2].children[1].remote_ts[1]", "overlaps"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := parseGWErrors(t, tt.doc)
			// Line 0 in want: the line depends on the prefix; check field
			// and message only.
			for i := range tt.want {
				if tt.want[i].line == 0 {
					for _, e := range errs {
						if e.Field == tt.want[i].field {
							tt.want[i].line = e.Pos.Line
						}
					}
				}
			}
			checkErrors(t, errs, tt.want)
		})
	}
}

// TestWeakProposals: sha1, prfsha1, modp1024 and modp1536 are taken when a
// file writes them (the clients that need them exist), and each is a
// warning with the file, line and field, once per proposal list; the
// defaults and the example warn of nothing.
func TestWeakProposals(t *testing.T) {
	doc := strings.Replace(ikeConn(`proposals = "aes256-sha256-modp2048,aes256-sha1-prfsha1-modp1024-modp1536"`),
		`remote_ts = ["10.2.0.0/24"]`, "remote_ts = [\"10.2.0.0/24\"]\n  esp_proposals = \"aes256-sha256-modp1024\"", 1) + ikeSecret
	g, err := ParseGateway("gw.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range g.Warnings() {
		got = append(got, w.Error())
	}
	want := []string{
		"gw.toml:5:13: connection[1].proposals: weak algorithm prfsha1 (RFC 8247 sections 2.2 and 2.3: SHA-1 is MUST- (on its way out); prefer sha256)",
		"gw.toml:5:13: connection[1].proposals: weak algorithm sha1 (RFC 8247 sections 2.2 and 2.3: SHA-1 is MUST- (on its way out); prefer sha256)",
		"gw.toml:5:13: connection[1].proposals: weak algorithm modp1024 (RFC 8247 section 2.4: SHOULD NOT (about 80 bits of strength); prefer modp2048, ecp256 or x25519)",
		"gw.toml:5:13: connection[1].proposals: weak algorithm modp1536 (RFC 8247 section 2.4: SHOULD NOT (about 80 bits of strength); prefer modp2048, ecp256 or x25519)",
		"gw.toml:16:19: connection[1].children[1].esp_proposals: weak algorithm modp1024 (RFC 8247 section 2.4: SHOULD NOT (about 80 bits of strength); prefer modp2048, ecp256 or x25519)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	g, err = ParseGateway("gw.toml", []byte(ikeConn("")+ikeSecret))
	if err != nil {
		t.Fatal(err)
	}
	if ws := g.Warnings(); len(ws) != 0 {
		t.Errorf("the defaults warn: %v", ws)
	}
	g, err = LoadGateway("../examples/ike-gateway.toml")
	if err != nil {
		t.Fatal(err)
	}
	if ws := g.Warnings(); len(ws) != 0 {
		t.Errorf("the example warns: %v", ws)
	}
}
