package config

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// raDoc is a remote-access gateway: a responder handing out addresses of
// two pools to EAP clients, and an initiator asking for virtual IPs.
const raDoc = `[tun]
addresses = ["10.1.0.1/24"]

[[pool]]
name = "rw"
addrs = "10.3.0.0/24"
dns = ["10.3.0.1", "2001:db8::53"]

[[pool]]
name = "rw6"
addrs = "2001:db8:3::10-2001:db8:3::ff"

[[connection]]
name = "rw"
local_addrs = ["192.0.2.1"]
remote_addrs = ["%any"]
pools = ["rw", "rw6"]
mobike = false
reauth_time = "2h"
  [connection.local]
  auth = "pubkey"
  certs = ["gw.pem"]
  [connection.remote]
  auth = "eap"
  eap_id = "%any"
  cacerts = ["ca.pem"]
  crls = ["ca.crl", "/etc/sluice/sub.crl"]
  revocation = "strict"
  [[connection.children]]
  name = "rw-net"
  local_ts = ["10.1.0.0/24"]
  remote_ts = ["10.3.0.0/24"]
  rekey_bytes = 1000000
  rekey_packets = 1000
  life_packets = 5000

[[connection]]
name = "home"
local_addrs = ["192.0.2.1"]
remote_addrs = ["192.0.2.7"]
vips = ["0.0.0.0", "::", "10.9.0.5"]
  [connection.local]
  auth = "psk"
  id = "client.example"
  [connection.remote]
  auth = "psk"
  id = "home.example"
  [[connection.children]]
  name = "home-net"
  local_ts = ["10.1.0.0/24"]
  remote_ts = ["10.9.0.0/24"]

` + raEAPSecrets + `
[[secret]]
type = "private"
file = "gw.key"

[[secret]]
type = "ike"
ids = ["client.example", "home.example"]
secret = "0x00112233445566778899aabbccddeeff"
`

const raEAPSecrets = `[[secret]]
type = "eap"
id = "carol"
secret = "carol's pw"

[[secret]]
type = "eap"
ids = ["dave", "eve"]
secret = "0x64617665"
`

func TestRemoteAccessKeys(t *testing.T) {
	g, err := ParseGateway("/etc/sluice/gw.toml", []byte(raDoc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Pool{
		{Name: "rw", Prefix: pfx("10.3.0.0/24"), First: addr("10.3.0.1"), Last: addr("10.3.0.254"), DNS: []netip.Addr{addr("10.3.0.1"), addr("2001:db8::53")}},
		{Name: "rw6", First: addr("2001:db8:3::10"), Last: addr("2001:db8:3::ff")},
	}
	if !reflect.DeepEqual(g.Pools, want) {
		t.Errorf("pools\n got %+v\nwant %+v", g.Pools, want)
	}
	if p := g.Pool("rw6"); p == nil || !p.Contains(addr("2001:db8:3::10")) || p.Contains(addr("2001:db8:3::100")) || p.Contains(addr("10.3.0.20")) {
		t.Errorf("Pool(rw6) %+v", p)
	}
	rw, home := g.Connection("rw"), g.Connection("home")
	if !slices.Equal(rw.Pools, []string{"rw", "rw6"}) || rw.MOBIKE || rw.ReauthTime != 2*time.Hour || rw.VIPs != nil {
		t.Errorf("rw: pools %v mobike %v reauth %v vips %v", rw.Pools, rw.MOBIKE, rw.ReauthTime, rw.VIPs)
	}
	r := rw.RemoteAuth
	if r.Auth != AuthEAP || r.EAPID != EAPIdentityAny || r.Revocation != RevocationStrict ||
		!slices.Equal(r.CRLs, []string{"/etc/sluice/ca.crl", "/etc/sluice/sub.crl"}) || !slices.Equal(r.CACerts, []string{"/etc/sluice/ca.pem"}) {
		t.Errorf("rw remote %+v", r)
	}
	if rw.LocalAuth.Revocation != "" {
		t.Errorf("local revocation %q", rw.LocalAuth.Revocation)
	}
	ch := rw.Children[0]
	if ch.RekeyBytes != 1000000 || ch.LifeBytes != 1100000 || ch.RekeyPackets != 1000 || ch.LifePackets != 5000 {
		t.Errorf("rw-net volumes %d/%d bytes %d/%d packets", ch.RekeyBytes, ch.LifeBytes, ch.RekeyPackets, ch.LifePackets)
	}
	if !slices.Equal(home.VIPs, []netip.Addr{addr("0.0.0.0"), addr("::"), addr("10.9.0.5")}) || !home.MOBIKE || home.ReauthTime != 0 {
		t.Errorf("home: vips %v mobike %v reauth %v", home.VIPs, home.MOBIKE, home.ReauthTime)
	}
	if home.RemoteAuth.Revocation != RevocationRelaxed || home.RemoteAuth.EAPID != "" {
		t.Errorf("home remote %+v", home.RemoteAuth)
	}
	if hc := home.Children[0]; hc.RekeyBytes != 0 || hc.LifeBytes != 0 || hc.RekeyPackets != 0 || hc.LifePackets != 0 {
		t.Errorf("home-net volumes %+v", hc)
	}
	for id, pw := range map[string]string{"carol": "carol's pw", "dave": "dave", "eve": "dave", "mallory": ""} {
		if got := g.EAPSecret(id); string(got) != pw {
			t.Errorf("EAPSecret(%s) = %q, want %q", id, got, pw)
		}
	}
	// An EAP password is no PSK.
	if psk := g.PSK("client.example", "carol"); string(psk) == "carol's pw" {
		t.Error("PSK returned an EAP password")
	}
}

func TestRemoteAccessDefaults(t *testing.T) {
	doc := ikeTun + strings.Replace(ikeConn("reauth_time = \"0s\""), `name = "b-net"`, "name = \"b-net\"\n  life_bytes = 0\n  rekey_bytes = 100\n  life_packets = 7", 1) + ikeSecret
	g, err := ParseGateway("gw.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := g.Connections[0]
	if !c.MOBIKE || c.ReauthTime != 0 || c.Pools != nil || c.VIPs != nil || c.RemoteAuth.Revocation != RevocationRelaxed {
		t.Errorf("connection %+v", c)
	}
	// life_bytes = 0 given is none; life_packets without rekey_packets
	// is a hard limit alone.
	if ch := c.Children[0]; ch.RekeyBytes != 100 || ch.LifeBytes != 0 || ch.RekeyPackets != 0 || ch.LifePackets != 7 {
		t.Errorf("child %+v", ch)
	}
	// A /31 and a /32 hand out every address; a range of one its one.
	for s, want := range map[string][2]string{
		"10.3.0.0/31":          {"10.3.0.0", "10.3.0.1"},
		"10.3.0.7/32":          {"10.3.0.7", "10.3.0.7"},
		"10.3.0.0/30":          {"10.3.0.1", "10.3.0.2"},
		"2001:db8::/64":        {"2001:db8::1", "2001:db8::ffff:ffff:ffff:fffe"},
		"10.3.0.9 - 10.3.0.9":  {"10.3.0.9", "10.3.0.9"},
		"10.255.255.0/24":      {"10.255.255.1", "10.255.255.254"},
		"2001:db8::/127":       {"2001:db8::", "2001:db8::1"},
		"172.16.0.0/12":        {"172.16.0.1", "172.31.255.254"},
		"10.3.0.10-10.3.1.200": {"10.3.0.10", "10.3.1.200"},
	} {
		p, msg := parsePoolAddrs(s)
		if msg != "" || p.First != addr(want[0]) || p.Last != addr(want[1]) {
			t.Errorf("%s: %v-%v %q, want %s-%s", s, p.First, p.Last, msg, want[0], want[1])
		}
	}
}

func TestRemoteAccessErrors(t *testing.T) {
	base := func(repl ...string) string {
		doc := raDoc
		for i := 0; i < len(repl); i += 2 {
			if !strings.Contains(doc, repl[i]) {
				panic("no " + repl[i])
			}
			doc = strings.Replace(doc, repl[i], repl[i+1], 1)
		}
		return doc
	}
	tests := []struct {
		name string
		doc  string
		at   []string // a text on the line of each error ("" for the line of the table)
		want []wantErr
	}{
		{"pool missing", base(`pools = ["rw", "rw6"]`, `pools = ["rw", "rw7"]`), []string{`"rw7"`},
			[]wantErr{{0, "connection[1].pools[2]", `no [[pool]] named "rw7" (pools: "rw", "rw6")`}}},
		{"pool twice", base(`pools = ["rw", "rw6"]`, `pools = ["rw", "rw"]`), []string{`pools =`},
			[]wantErr{{0, "connection[1].pools[2]", `duplicate pool "rw" (also connection[1].pools[1])`}}},
		{"pools string", base(`pools = ["rw", "rw6"]`, `pools = "rw"`), []string{`pools =`},
			[]wantErr{{0, "connection[1].pools", `want an array of strings, got string (write ["rw"])`}}},
		{"vip prefix", base(`"10.9.0.5"]`, `"10.9.0.0/24"]`), []string{"vips ="},
			[]wantErr{{0, "connection[2].vips[3]", "want a single address, not a prefix"}}},
		{"vip twice", base(`"10.9.0.5"]`, `"0.0.0.0"]`), []string{"vips ="},
			[]wantErr{{0, "connection[2].vips[3]", "duplicate virtual IP 0.0.0.0/32 (also connection[2].vips[1]"}}},
		{"vip multicast", base(`"10.9.0.5"]`, `"224.0.0.1"]`), []string{"vips ="},
			[]wantErr{{0, "connection[2].vips[3]", "224.0.0.1 cannot be a virtual IP"}}},
		{"mobike", base("mobike = false", `mobike = "no"`), []string{"mobike ="},
			[]wantErr{{0, "connection[1].mobike", "want a boolean (true or false), got string"}}},
		{"reauth short", base(`reauth_time = "2h"`, `reauth_time = "10ms"`), []string{"reauth_time ="},
			[]wantErr{{0, "connection[1].reauth_time", `duration 10ms is below 1s (want 1s..8760h0m0s; default "0s": none)`}}},
		{"reauth int", base(`reauth_time = "2h"`, `reauth_time = 7200`), []string{"reauth_time ="},
			[]wantErr{{0, "connection[1].reauth_time", `got the integer 7200`}}},
		{"eap_id local", base("certs = [\"gw.pem\"]", "certs = [\"gw.pem\"]\n  eap_id = \"gw\""), []string{`eap_id = "gw"`},
			[]wantErr{{0, "connection[1].local.eap_id", "eap_id belongs in [connection.remote]"}}},
		{"crls local", base("certs = [\"gw.pem\"]", "certs = [\"gw.pem\"]\n  crls = [\"a.crl\"]"), []string{`crls = ["a.crl"]`},
			[]wantErr{{0, "connection[1].local.crls", "crls belongs in [connection.remote]"}}},
		{"revocation local", base("certs = [\"gw.pem\"]", "certs = [\"gw.pem\"]\n  revocation = \"strict\""), []string{`revocation = "strict"`},
			[]wantErr{{0, "connection[1].local.revocation", "revocation belongs in [connection.remote]"}}},
		{"eap_id psk", base("auth = \"psk\"\n  id = \"home.example\"", "auth = \"psk\"\n  id = \"home.example\"\n  eap_id = \"carol\""), []string{`eap_id = "carol"`},
			[]wantErr{{0, "connection[2].remote.eap_id", `eap_id with auth = "psk": only EAP asks for an EAP identity`}}},
		{"eap_id empty", base(`eap_id = "%any"`, `eap_id = ""`), []string{`eap_id = ""`},
			[]wantErr{{0, "connection[1].remote.eap_id", `empty EAP identity (want "%any"`}}},
		{"crls psk", base("auth = \"psk\"\n  id = \"home.example\"", "auth = \"psk\"\n  id = \"home.example\"\n  crls = [\"ca.crl\"]"), []string{`crls = ["ca.crl"]`},
			[]wantErr{{0, "connection[2].remote.crls", `crls with auth = "psk": the peer shows no certificate to check`}}},
		{"crl empty", base(`crls = ["ca.crl", "/etc/sluice/sub.crl"]`, `crls = ["ca.crl", ""]`), []string{"crls ="},
			[]wantErr{{0, "connection[1].remote.crls[2]", "empty file name (want a CRL file, PEM or DER)"}}},
		{"revocation value", base(`revocation = "strict"`, `revocation = "hard"`), []string{"revocation ="},
			[]wantErr{{0, "connection[1].remote.revocation", `unknown revocation policy "hard" (valid: relaxed`}}},
		{"strict without crls", base("  crls = [\"ca.crl\", \"/etc/sluice/sub.crl\"]\n", ""), []string{"revocation ="},
			[]wantErr{{0, "connection[1].remote.revocation", `revocation = "strict" without crls`}}},
		{"remote auth", base(`auth = "eap"`, `auth = "eap-md5"`), []string{`"eap-md5"`},
			[]wantErr{{0, "connection[1].remote.auth", `unknown authentication "eap-md5" (valid: psk`}}},
		{"eap-tls no cacerts", base(`auth = "eap"`, `auth = "eap-tls"`, "  cacerts = [\"ca.pem\"]\n", ""), []string{"[connection.remote]"},
			[]wantErr{{0, "connection[1].remote.cacerts", `auth = "eap-tls" needs what the peer's certificate must chain to`}}},
		{"eap-tls no cert", base(`auth = "eap"`, `auth = "eap-tls"`, "auth = \"pubkey\"\n  certs = [\"gw.pem\"]", "auth = \"psk\"\n  id = \"client.example\""), []string{`"eap-tls"`},
			[]wantErr{{0, "connection[1].remote.auth", `auth = "eap-tls" needs our certificate for EAP-TLS's server side`}}},
		{"mschapv2 no secret", base(`auth = "eap"`, `auth = "eap-mschapv2"`, "  crls = [\"ca.crl\", \"/etc/sluice/sub.crl\"]\n  revocation = \"strict\"\n", "", raEAPSecrets, ""),
			[]string{`"eap-mschapv2"`}, []wantErr{{0, "connection[1].remote.auth", `auth = "eap-mschapv2", but no [[secret]] with type = "eap" holds a password`}}},
		{"mschapv2 eap_id", base(`auth = "eap"`, `auth = "eap-mschapv2"`, `eap_id = "%any"`, `eap_id = "mallory"`, "  crls = [\"ca.crl\", \"/etc/sluice/sub.crl\"]\n  revocation = \"strict\"\n", ""), []string{`"eap-mschapv2"`},
			[]wantErr{{0, "connection[1].remote.auth", `auth = "eap-mschapv2" with eap_id = "mallory", but no [[secret]] with type = "eap" has that id`}}},
		{"eap nothing", base("  cacerts = [\"ca.pem\"]\n  crls = [\"ca.crl\", \"/etc/sluice/sub.crl\"]\n  revocation = \"strict\"\n", "", raEAPSecrets, ""),
			[]string{`auth = "eap"`}, []wantErr{{0, "connection[1].remote.auth", `auth = "eap", but no method can run`}}},
		{"rekey_bytes negative", base("rekey_bytes = 1000000", "rekey_bytes = -1"), []string{"rekey_bytes ="},
			[]wantErr{{0, "connection[1].children[1].rekey_bytes", "-1 out of range (want 0 for none, or a count of bytes)"}}},
		{"rekey_bytes string", base("rekey_bytes = 1000000", `rekey_bytes = "1M"`), []string{"rekey_bytes ="},
			[]wantErr{{0, "connection[1].children[1].rekey_bytes", "want an integer, got string"}}},
		{"life_bytes below", base("rekey_bytes = 1000000", "rekey_bytes = 1000000\n  life_bytes = 1000000"), []string{"life_bytes ="},
			[]wantErr{{0, "connection[1].children[1].life_bytes", "life_bytes 1000000 is not above rekey_bytes 1000000 (connection[1].children[1].rekey_bytes, line 33)"}}},
		{"life_packets below", base("life_packets = 5000", "life_packets = 999"), []string{"life_packets ="},
			[]wantErr{{0, "connection[1].children[1].life_packets", "life_packets 999 is not above rekey_packets 1000"}}},
		{"pool no name", base("name = \"rw6\"\n", ""), []string{"[[pool]]\naddrs"},
			[]wantErr{{0, "pool[2].name", "missing required key (a name, unique among pools)"}}}, // one mistake, one error
		{"pool no addrs", base("addrs = \"2001:db8:3::10-2001:db8:3::ff\"\n", ""), []string{"[[pool]]\nname = \"rw6\""},
			[]wantErr{{0, "pool[2].addrs", "missing required key (the addresses to hand out"}}},
		{"pool host bits", base(`addrs = "10.3.0.0/24"`, `addrs = "10.3.0.5/24"`), []string{"addrs ="},
			[]wantErr{{0, "pool[1].addrs", "prefix 10.3.0.5/24 has host bits set (did you mean 10.3.0.0/24, or a range starting at 10.3.0.5?)"}}},
		{"pool backwards", base(`addrs = "10.3.0.0/24"`, `addrs = "10.3.0.200-10.3.0.10"`), []string{"addrs ="},
			[]wantErr{{0, "pool[1].addrs", `range "10.3.0.200-10.3.0.10" ends before it starts`}}},
		{"pool families", base(`addrs = "10.3.0.0/24"`, `addrs = "10.3.0.1-2001:db8::1"`), []string{"addrs ="},
			[]wantErr{{0, "pool[1].addrs", "mixes IPv4 and IPv6"}}},
		{"pool bad range", base(`addrs = "10.3.0.0/24"`, `addrs = "10.3.0.1-x"`), []string{"addrs ="},
			[]wantErr{{0, "pool[1].addrs", `invalid range "10.3.0.1-x": invalid IP address "x"`}}},
		{"pool one address", base(`addrs = "10.3.0.0/24"`, `addrs = "10.3.0.1"`), []string{"addrs ="},
			[]wantErr{{0, "pool[1].addrs", `"10.3.0.1" is one address (want a prefix such as 10.3.0.0/24 or a range`}}},
		{"pool garbage", base(`addrs = "10.3.0.0/24"`, `addrs = "lots"`), []string{"addrs ="},
			[]wantErr{{0, "pool[1].addrs", `invalid pool "lots"`}}},
		{"pool multicast", base(`addrs = "10.3.0.0/24"`, `addrs = "224.0.0.0/24"`), []string{"addrs ="},
			[]wantErr{{0, "pool[1].addrs", "holds addresses a host cannot be given"}}},
		{"pool dns", base(`dns = ["10.3.0.1", "2001:db8::53"]`, `dns = ["10.3.0.1", "dns.example"]`), []string{"dns ="},
			[]wantErr{{0, "pool[1].dns[2]", `invalid IP address "dns.example"`}}},
		{"pool dns twice", base(`dns = ["10.3.0.1", "2001:db8::53"]`, `dns = ["10.3.0.1", "10.3.0.1"]`), []string{"dns ="},
			[]wantErr{{0, "pool[1].dns[2]", "duplicate DNS server 10.3.0.1/32"}}},
		{"pool key", base(`dns = ["10.3.0.1", "2001:db8::53"]`, `dns = ["10.3.0.1"]`+"\nsubnet = \"x\""), []string{"subnet ="},
			[]wantErr{{0, "pool[1].subnet", "unknown key (valid: name, addrs, dns)"}}},
		{"pool name twice", base(`name = "rw6"`, `name = "rw"`, `pools = ["rw", "rw6"]`, `pools = ["rw"]`), []string{`name = "rw"` + "\naddrs = \"2001"},
			[]wantErr{{0, "pool[2].name", `duplicate pool name "rw"`}}},
		{"pool overlap", base(`addrs = "2001:db8:3::10-2001:db8:3::ff"`, `addrs = "10.3.0.200-10.3.1.10"`), []string{`"10.3.0.200-`},
			[]wantErr{{0, "pool[2].addrs", `pool "rw6" overlaps pool "rw" (pool[1].addrs, line 6): an address would be handed out twice`}}},
		{"pool table", base("[[pool]]\nname = \"rw6\"\naddrs = \"2001:db8:3::10-2001:db8:3::ff\"\n", "", "[[pool]]", "[pool]", `pools = ["rw", "rw6"]`, `pools = ["rw"]`), []string{"[pool]"},
			[]wantErr{{0, "pool", "want an array of tables, got table (write [[pool]], not [pool])"}}},
		{"eap secret no id", base("id = \"carol\"\n", ""), []string{"[[secret]]\ntype = \"eap\"\nsecret"},
			[]wantErr{{0, "secret[1].id", "missing required key (the EAP identity the password is for"}}},
		{"eap secret id and ids", base("id = \"carol\"\n", "id = \"carol\"\nids = [\"x\"]\n"), []string{`id = "carol"`},
			[]wantErr{{0, "secret[1].id", "id and ids both given (secret[1].ids, line 56): write one"}}},
		{"eap secret empty", base(`"carol's pw"`, `""`), []string{`secret = ""`},
			[]wantErr{{0, "secret[1].secret", "empty password"}}},
		{"eap secret long", base(`"carol's pw"`, `"`+strings.Repeat("p", MaxEAPPassword+1)+`"`), []string{`secret = "ppp`},
			[]wantErr{{0, "secret[1].secret", "password of 257 characters is too long (want at most 256"}}},
		{"eap secret hex", base(`"0x64617665"`, `"0x6461766"`), []string{`"0x6461766"`},
			[]wantErr{{0, "secret[2].secret", "invalid hex secret"}}},
		{"eap secret file", base("id = \"carol\"\n", "id = \"carol\"\nfile = \"k.pem\"\n"), []string{`file = "k.pem"`},
			[]wantErr{{0, "secret[1].file", `file belongs to a secret with type = "private"`}}},
		{"eap secret no secret", base("secret = \"carol's pw\"\n", ""), []string{"[[secret]]\ntype = \"eap\"\nid"},
			[]wantErr{{0, "secret[1].secret", "missing required key (the EAP password"}}},
		{"eap secret empty id", base(`id = "carol"`, `id = ""`), []string{`id = ""`},
			[]wantErr{{0, "secret[1].id", "empty identity"}}},
		{"tls only pool", "[[pool]]\nname = \"p\"\naddrs = \"10.3.0.0/24\"\n[[tls]]\nname = \"w\"\nlisten = \"127.0.0.1:8443\"\nbackend = \"static:www\"\n  [[tls.cert]]\n  cert = \"a.pem\"\n  key = \"a.key\"\n",
			[]string{"[[pool]]"}, []wantErr{{0, "pool", "[[pool]] without any [[tunnel]]"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, at := range tt.at {
				tt.want[i].line = lineOf(t, tt.doc, at)
			}
			checkErrors(t, parseGWErrors(t, tt.doc), tt.want)
		})
	}
}

// lineOf is the line on which the first occurrence of text in doc
// starts.
func lineOf(t *testing.T, doc, text string) int {
	t.Helper()
	i := strings.Index(doc, text)
	if i < 0 {
		t.Fatalf("no %q in the document", text)
	}
	return strings.Count(doc[:i], "\n") + 1
}

// TestEncodeRemoteAccess round-trips every key of remote access through
// File.Encode.
func TestEncodeRemoteAccess(t *testing.T) {
	f := &File{
		TUN: &FileTUN{Addresses: []string{"10.1.0.1/24"}},
		Connections: []FileConnection{{
			Name: "rw", LocalAddrs: []string{"192.0.2.1"}, RemoteAddrs: []string{"%any"},
			Pools: []string{"rw"}, MOBIKE: new(false), ReauthTime: "3h",
			Local:  FileAuth{Auth: "pubkey", Certs: []string{"gw.pem"}},
			Remote: FileAuth{Auth: "eap-tls", EAPID: "%any", CACerts: []string{"ca.pem"}, CRLs: []string{"ca.crl"}, Revocation: "strict"},
			Children: []FileChild{{Name: "rw-net", LocalTS: []string{"10.1.0.0/24"}, RemoteTS: []string{"10.3.0.0/24"},
				RekeyBytes: 1 << 30, LifeBytes: 1 << 31, RekeyPackets: 1 << 20, LifePackets: 1 << 21}},
		}, {
			Name: "up", LocalAddrs: []string{"192.0.2.1"}, RemoteAddrs: []string{"192.0.2.9"}, VIPs: []string{"0.0.0.0", "::"},
			Local:    FileAuth{Auth: "psk", ID: "me"},
			Remote:   FileAuth{Auth: "psk", ID: "them"},
			Children: []FileChild{{Name: "up-net", LocalTS: []string{"10.1.0.0/24"}, RemoteTS: []string{"10.8.0.0/24"}}},
		}},
		Pools: []FilePool{{Name: "rw", Addrs: "10.3.0.0/24", DNS: []string{"10.3.0.1"}}},
		Secrets: []FileSecret{
			{Type: "eap", ID: "carol", Secret: "pw"},
			{Type: "eap", IDs: []string{"dave"}, Secret: "pw2"},
			{Type: "private", File: "gw.key"},
			{Type: "ike", IDs: []string{"me", "them"}, Secret: SecretHex(make([]byte, 16))},
		},
	}
	g := decodeFile(t, "/etc/gw.toml", f)
	rw, up := g.Connection("rw"), g.Connection("up")
	if !slices.Equal(rw.Pools, []string{"rw"}) || rw.MOBIKE || rw.ReauthTime != 3*time.Hour || !up.MOBIKE {
		t.Errorf("rw %+v", rw)
	}
	if r := rw.RemoteAuth; r.Auth != AuthEAPTLS || r.EAPID != "%any" || !slices.Equal(r.CRLs, []string{"/etc/ca.crl"}) || r.Revocation != RevocationStrict {
		t.Errorf("rw remote %+v", r)
	}
	if ch := rw.Children[0]; ch.RekeyBytes != 1<<30 || ch.LifeBytes != 1<<31 || ch.RekeyPackets != 1<<20 || ch.LifePackets != 1<<21 {
		t.Errorf("rw-net %+v", ch)
	}
	if !slices.Equal(up.VIPs, []netip.Addr{addr("0.0.0.0"), addr("::")}) {
		t.Errorf("up vips %v", up.VIPs)
	}
	if p := g.Pool("rw"); p == nil || p.Prefix != pfx("10.3.0.0/24") || !slices.Equal(p.DNS, []netip.Addr{addr("10.3.0.1")}) {
		t.Errorf("pool %+v", p)
	}
	if string(g.EAPSecret("carol")) != "pw" || string(g.EAPSecret("dave")) != "pw2" {
		t.Errorf("eap secrets %+v", g.Secrets)
	}
}
