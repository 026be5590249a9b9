package gateway

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/config"
)

// A refused reload names the tables as the file writes them: [tun], not
// the [[tun]] that formatting a list of names with %v made of it.
func TestFixedPartsEqualNamesTables(t *testing.T) {
	a := &config.Gateway{File: "gw.toml", TUN: config.TUN{Name: "sluice0", MTU: 1400}}
	b := *a
	b.TUN.MTU = 1300
	err := fixedPartsEqual(a, &b)
	want := "gateway: gw.toml: changing [tun] needs a restart; the running configuration stays"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	b.Workers = a.Workers + 1
	b.UDP = &config.UDP{}
	err = fixedPartsEqual(a, &b)
	if err == nil || !strings.Contains(err.Error(), "changing gateway.workers, [tun], [udp] needs a restart") {
		t.Fatalf("got %v", err)
	}
	if err := fixedPartsEqual(a, a); err != nil {
		t.Fatalf("same configuration refused: %v", err)
	}
}

// A reload may change the addresses of [[ha.group]]s, and nothing else
// of [ha]: the pair's channel, members and groups live for the process.
func TestFixedPartsEqualHAAddresses(t *testing.T) {
	addr := func(s string) config.HAAddress {
		return config.HAAddress{Prefix: netip.MustParsePrefix(s), Dev: "wan0"}
	}
	ha := func(groups ...config.HAGroup) *config.HA {
		return &config.HA{Name: "a", PeerName: "b", Listen: netip.MustParseAddrPort("10.9.0.1:7310"),
			Peer: netip.MustParseAddrPort("10.9.0.2:7310"), Preference: 100, Groups: groups}
	}
	a := &config.Gateway{File: "gw.toml", HA: ha(config.HAGroup{Name: "a", Preference: 200}, config.HAGroup{Name: "b", Preference: 100})}
	b := *a
	b.HA = ha(config.HAGroup{Name: "a", Preference: 200, Addresses: []config.HAAddress{addr("192.0.2.10/24"), addr("192.0.2.11/24")}},
		config.HAGroup{Name: "b", Preference: 100, Addresses: []config.HAAddress{addr("192.0.2.12/24")}})
	if err := fixedPartsEqual(a, &b); err != nil {
		t.Errorf("addresses added: %v", err)
	}
	if err := fixedPartsEqual(&b, a); err != nil {
		t.Errorf("addresses removed: %v", err)
	}
	for name, change := range map[string]func(h *config.HA){
		"group preference": func(h *config.HA) { h.Groups[0].Preference = 150 },
		"group name":       func(h *config.HA) { h.Groups[1].Name = "c" },
		"group added":      func(h *config.HA) { h.Groups = append(h.Groups, config.HAGroup{Name: "c"}) },
		"peer":             func(h *config.HA) { h.Peer = netip.MustParseAddrPort("10.9.0.3:7310") },
	} {
		c := *a
		c.HA = ha(config.HAGroup{Name: "a", Preference: 200}, config.HAGroup{Name: "b", Preference: 100})
		change(c.HA)
		err := fixedPartsEqual(a, &c)
		if err == nil || !strings.Contains(err.Error(), "changing [ha] (other than the groups' addresses) needs a restart") {
			t.Errorf("%s: %v", name, err)
		}
	}
	c := *a
	c.HA = nil
	if err := fixedPartsEqual(a, &c); err == nil {
		t.Error("[ha] removed: no error")
	}
}

// An IPsec gateway started with no tunnel ([udp] and nothing else) takes
// tunnels and connections by reload, and may lose them all again: it
// stays an IPsec gateway (config.Gateway.EmptyIPsec), not TLS-only.
func TestFixedPartsEqualEmptyIPsec(t *testing.T) {
	parse := func(text string) *config.Gateway {
		t.Helper()
		g, err := config.ParseGateway("gw.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	const head = "[tun]\nname = \"sluice0\"\n[udp]\nlisten = \"0.0.0.0:4500\"\n[rawesp]\nlisten = \"0.0.0.0\"\n"
	const tls = "[[tls]]\nname = \"web\"\nlisten = \"127.0.0.1:8443\"\nbackend = \"static:www\"\n[[tls.cert]]\ncert = \"a.pem\"\nkey = \"a.key\"\n"
	const conn = `
[[connection]]
name = "c"
local_addrs = ["192.0.2.1"]
remote_addrs = ["192.0.2.2"]
  [connection.local]
  auth = "psk"
  id = "a"
  [connection.remote]
  auth = "psk"
  id = "b"
  [[connection.children]]
  name = "net"
  local_ts = ["10.1.0.0/24"]
  remote_ts = ["10.2.0.0/24"]
[[secret]]
type = "ike"
ids = ["a", "b"]
secret = "0x00112233445566778899aabbccddeeff"
`
	empty, withTLS, full := parse(head), parse(head+tls), parse(head+conn)
	for _, p := range [][2]*config.Gateway{{empty, full}, {full, empty}, {withTLS, full}, {full, withTLS}, {empty, withTLS}} {
		if err := fixedPartsEqual(p[0], p[1]); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// A static tunnel whose address moves to another group with the SAs it
// has is refused: its sequence numbers stay with the group they were
// leased in. With new SAs it moves.
func TestRegroupedStaticTunnel(t *testing.T) {
	doc := func(g1, g2, spi, key string) *config.Gateway {
		t.Helper()
		text := fmt.Sprintf(`[udp]
listen = "0.0.0.0:4500"

[[tunnel]]
name = "t"
local = "192.0.2.10"
peer = "192.0.2.2"
remote = ["10.2.0.0/24"]
out = "o"
in = ["i"]

[[sa]]
name = "o"
spi = %[3]s
encap = "udp"
esp = "aes128gcm16"
enc_key = "%[4]s"

[[sa]]
name = "i"
spi = 0x2001
encap = "udp"
esp = "aes128gcm16"
enc_key = "%[4]s"

[ha]
name = "a"
listen = "10.9.0.1:7310"
peer = "10.9.0.2:7310"
cert = "a.crt"
key = "a.key"
ca = "ca.crt"
peer_name = "b"

[[ha.group]]
name = "g1"
addresses = [%[1]s]

[[ha.group]]
name = "g2"
addresses = [%[2]s]
`, g1, g2, spi, key)
		g, err := config.ParseGateway("gw.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	const vip, key1, key2 = `"192.0.2.10/24 dev wan0"`, "000102030405060708090a0b0c0d0e0f10111213", "ff0102030405060708090a0b0c0d0e0f10111213"
	a := doc(vip, "", "0x1001", key1)
	for _, next := range []*config.Gateway{doc("", vip, "0x1001", key1), doc("", "", "0x1001", key1)} {
		err := checkRegroupedTunnels(a, next)
		if err == nil || !strings.Contains(err.Error(), "gw.toml:6:9: tunnel[1].local: 192.0.2.10 moves from group g1 to ") {
			t.Errorf("moved with its SAs: %v", err)
		}
	}
	if err := checkRegroupedTunnels(doc("", "", "0x1001", key1), doc(vip, "", "0x1001", key1)); err == nil || !strings.Contains(err.Error(), "from no group to group g1") {
		t.Errorf("moved into a group with its SAs: %v", err)
	}
	if err := checkRegroupedTunnels(a, doc("", vip, "0x1002", key2)); err != nil {
		t.Errorf("moved with new SAs: %v", err)
	}
	if err := checkRegroupedTunnels(a, doc(vip+`, "192.0.2.11/24 dev wan0"`, "", "0x1001", key1)); err != nil {
		t.Errorf("group grew, tunnel stays: %v", err)
	}
}
