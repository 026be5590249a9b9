package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/gateway/certgen"
)

// haHead is an [ha] section with every required key, lines 1-8; keys
// written after it belong to it.
const haHead = `[ha]
name = "a"
listen = "10.9.0.1:4510"
peer = "10.9.0.2:4510"
cert = "a.crt"
key = "a.key"
ca = "ca.crt"
peer_name = "b"
`

// haGroup1 is a group (3 lines) that holds 192.0.2.1, tun1's local
// address.
const haGroup1 = "[[ha.group]]\nname = \"g1\"\naddresses = [\"192.0.2.1/24 dev wan0\"]\n"

// haDoc is a gateway with [ha] (haHead, then extra, then groups) before
// tun1 and sas1.
func haDoc(extra, groups string) string { return haHead + extra + groups + tun1 + sas1 }

// TestHAValid loads a file that gives every key of [ha] and its groups.
func TestHAValid(t *testing.T) {
	const file = "testdata/gateway-ha.toml"
	g, err := LoadGateway(file)
	if err != nil {
		t.Fatal(err)
	}
	want := &HA{
		Name: "gw-a", PeerName: "gw-b",
		Listen: netip.MustParseAddrPort("0.0.0.0:4510"), Peer: netip.MustParseAddrPort("10.9.0.2:4510"),
		Cert: filepath.Join("testdata", "ha/a.crt"), Key: "/etc/sluice/ha/a.key", CA: filepath.Join("testdata", "ha/ca.crt"),
		Witness: "10.0.0.254:53", Hook: filepath.Join("testdata", "ha-hook"),
		Interval: 50 * time.Millisecond, HookTimeout: 2 * time.Second, Misses: 5, Preference: 150, Preempt: true,
		Groups: []HAGroup{
			{Name: "site1", Preference: 200, Addresses: []HAAddress{
				{pfx("192.0.2.10/24"), "wan0"}, {pfx("2001:db8::10/64"), "wan0"}, {pfx("10.1.0.1/24"), "lan0"}}},
			{Name: "site2", Preference: 150, Addresses: []HAAddress{{pfx("192.0.2.11/24"), "wan0"}}},
		},
	}
	if !reflect.DeepEqual(g.HA, want) {
		t.Errorf("[ha]:\n got %+v\nwant %+v", g.HA, want)
	}
	for a, grp := range map[string]string{"192.0.2.10": "site1", "2001:db8::10": "site1", "10.1.0.1": "site1", "192.0.2.11": "site2", "192.0.2.1": "", "192.0.2.12": ""} {
		if got := g.HAGroupOf(addr(a)); got != grp {
			t.Errorf("HAGroupOf(%s) = %q, want %q", a, got, grp)
		}
	}
	if got := g.HAGroupOf(netip.Addr{}); got != "" {
		t.Errorf("HAGroupOf(zero) = %q", got)
	}
	if got := g.HAGroupOf(g.Tunnels[0].Local); got != "site1" {
		t.Errorf("tunnel t's group %q, want site1", got)
	}
	if p := g.FieldPos("ha.group[2].addresses[1]"); p.Line != 33 {
		t.Errorf("FieldPos(ha.group[2].addresses[1]) = %v, want line 33", p)
	}
	if got := want.Groups[0].Addresses[1].String(); got != "2001:db8::10/64 dev wan0" {
		t.Errorf("HAAddress.String() = %q", got)
	}
}

// TestHADefaults: the keys left out take their defaults; a file without
// [ha] has no HA, and every group address is nobody's group.
func TestHADefaults(t *testing.T) {
	g, err := ParseGateway("gw.toml", []byte(haDoc("", haGroup1)))
	if err != nil {
		t.Fatal(err)
	}
	h := g.HA
	if h == nil || h.Interval != DefaultHAInterval || h.Misses != DefaultHAMisses || h.HookTimeout != DefaultHAHookTimeout ||
		h.Preference != DefaultHAPreference || h.Preempt || h.Witness != "" || h.Hook != "" {
		t.Fatalf("defaults: %+v", h)
	}
	if h.Interval != 100*time.Millisecond || h.Misses != 3 || h.HookTimeout != 5*time.Second || h.Preference != 100 {
		t.Errorf("default values changed: %+v", h)
	}
	if h.Groups[0].Preference != DefaultHAPreference || h.Cert != "a.crt" {
		t.Errorf("group %+v, cert %q", h.Groups[0], h.Cert)
	}
	if got := g.HAGroupOf(g.Tunnels[0].Local); got != "g1" {
		t.Errorf("HAGroupOf(tunnel local) = %q, want g1", got)
	}
	// A state directory beside [ha] is allowed: SAs not in a group (and
	// static SAs of a lone member) still use it.
	// A hook in the directory of a file named without one is not looked
	// up in PATH.
	if g, err := ParseGateway("gw.toml", []byte(haDoc("hook = \"ha-hook\"\n", haGroup1))); err != nil {
		t.Error(err)
	} else if g.HA.Hook != "./ha-hook" {
		t.Errorf("hook next to gw.toml: %q, want ./ha-hook", g.HA.Hook)
	}
	if _, err := ParseGateway("gw.toml", []byte("[gateway]\nstate_dir = \"/var/lib/sluice-a\"\n"+haDoc("", haGroup1))); err != nil {
		t.Errorf("state_dir with [ha]: %v", err)
	}
	g, err = ParseGateway("gw.toml", []byte(tun1+sas1))
	if err != nil {
		t.Fatal(err)
	}
	if g.HA != nil || g.HAGroupOf(addr("192.0.2.1")) != "" {
		t.Errorf("without [ha]: %+v", g.HA)
	}
}

// TestHAGroupOfConnection: an IKE connection whose local address is a
// group's is in that group.
func TestHAGroupOfConnection(t *testing.T) {
	doc := haHead + "[[ha.group]]\nname = \"ike\"\naddresses = [\"192.0.2.1/24 dev wan0\"]\n" + ikeConn("") + ikeSecret
	g, err := ParseGateway("gw.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got := g.HAGroupOf(g.Connections[0].Local); got != "ike" {
		t.Errorf("connection's group %q, want ike", got)
	}
}

func TestHAErrors(t *testing.T) {
	without := func(key string) string {
		var lines []string
		for _, l := range strings.Split(haHead, "\n") {
			if !strings.HasPrefix(l, key+" = ") {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n") + haGroup1 + tun1 + sas1
	}
	with := func(key, value string) string {
		doc := haDoc("", haGroup1)
		i := strings.Index(doc, "\n"+key+" = ")
		j := strings.IndexByte(doc[i+1:], '\n')
		return doc[:i+1] + key + " = " + value + doc[i+1+j:]
	}
	group := func(lines string) string { return "[[ha.group]]\n" + lines }
	tests := []struct {
		name string
		doc  string
		want []wantErr
	}{
		// Structure.
		{"unknown key", haDoc("misse = 3\n", haGroup1), []wantErr{{9, "ha.misse",
			"unknown key (valid: name, listen, peer, cert, key, ca, peer_name, interval, misses, witness, hook, hook_timeout, preference, preempt, group)"}}},
		{"key case", haDoc("Misses = 3\n", haGroup1), []wantErr{{9, "ha.Misses", "did you mean misses?"}}},
		{"ha array", strings.Replace(haDoc("", haGroup1), "[ha]", "[[ha]]", 1), []wantErr{{1, "ha", "want a table, got array (write [ha], not [[ha]])"}}},
		{"missing name", without("name"), []wantErr{{1, "ha.name", "missing required key (this member's name"}}},
		{"missing listen", without("listen"), []wantErr{{1, "ha.listen", "missing required key (the address this member's sync channel listens on"}}},
		{"missing peer", without("peer"), []wantErr{{1, "ha.peer", "missing required key (the other member's sync address"}}},
		{"missing cert", without("cert"), []wantErr{{1, "ha.cert", "missing required key"}}},
		{"missing key", without("key"), []wantErr{{1, "ha.key", "missing required key"}}},
		{"missing ca", without("ca"), []wantErr{{1, "ha.ca", "missing required key"}}},
		{"missing peer_name", without("peer_name"), []wantErr{{1, "ha.peer_name", "missing required key (the other member's name"}}},
		{"no group", haDoc("", ""), []wantErr{{1, "ha.group", "missing required [[ha.group]]"}}},
		{"group table", haDoc("", "[ha.group]\nname = \"g1\"\naddresses = [\"192.0.2.1/24 dev wan0\"]\n"), []wantErr{{9, "ha.group", "write [[ha.group]], not [ha.group]"}}},
		{"group string", haDoc("group = \"g1\"\n", ""), []wantErr{{9, "ha.group", "want an array of tables, got string"}}},
		{"group unknown key", haDoc("", haGroup1+"prefer = 1\n"), []wantErr{{12, "ha.group[1].prefer", "unknown key (valid: name, addresses, preference)"}}},
		{"group no name", haDoc("", group("addresses = [\"192.0.2.1/24 dev wan0\"]\n")), []wantErr{{9, "ha.group[1].name", "missing required key"}}},
		{"group empty array", haDoc("group = []\n", ""), []wantErr{{9, "ha.group", "no group (want at least one [[ha.group]]"}}},
		// A group without addresses is valid: TestHAGroupWithoutAddresses.

		// Values.
		{"name form", with("name", `"Gw A"`), []wantErr{{2, "ha.name", `invalid member name "Gw A" (want 1 to 32 of a-z, 0-9 and '-'`}}},
		{"name long", with("name", `"`+strings.Repeat("a", 33)+`"`), []wantErr{{2, "ha.name", "invalid member name"}}},
		{"name empty", with("name", `""`), []wantErr{{2, "ha.name", "invalid member name"}}},
		{"peer_name form", with("peer_name", `"b_1"`), []wantErr{{8, "ha.peer_name", `invalid member name "b_1"`}}},
		{"same names", with("peer_name", `"a"`), []wantErr{{8, "ha.peer_name", `peer_name "a" is this member's name too (ha.name, line 2): the two members need different names`}}},
		{"listen no port", with("listen", `"10.9.0.1"`), []wantErr{{3, "ha.listen", `"10.9.0.1" has no port (want address:port, e.g. 10.9.0.1:4510)`}}},
		{"listen name", with("listen", `"gw-a:4510"`), []wantErr{{3, "ha.listen", `invalid address "gw-a:4510" (want an IP address and port such as 10.9.0.1:4510, or 0.0.0.0:4510 for every address)`}}},
		{"listen port 0", with("listen", `"10.9.0.1:0"`), []wantErr{{3, "ha.listen", "port 0"}}},
		{"listen multicast", with("listen", `"224.0.0.1:4510"`), []wantErr{{3, "ha.listen", "multicast"}}},
		{"peer unspecified", with("peer", `"0.0.0.0:4510"`), []wantErr{{4, "ha.peer", `0.0.0.0 is not an address to connect to (want the other member's address, e.g. 10.9.0.2:4510)`}}},
		{"peer is listen", with("peer", `"10.9.0.1:4510"`), []wantErr{{4, "ha.peer", "peer 10.9.0.1:4510 is listen too (ha.listen, line 3)"}}},
		{"cert empty", with("cert", `""`), []wantErr{{5, "ha.cert", "empty file name (want this member's PEM certificate"}}},
		{"ca integer", with("ca", `1`), []wantErr{{7, "ha.ca", "want a string, got integer"}}},
		{"interval short", haDoc("interval = \"5ms\"\n", haGroup1), []wantErr{{9, "ha.interval", "duration 5ms is below 10ms (want 10ms..10s; default 100ms)"}}},
		{"interval long", haDoc("interval = \"1m\"\n", haGroup1), []wantErr{{9, "ha.interval", "is above 10s"}}},
		{"interval integer", haDoc("interval = 100\n", haGroup1), []wantErr{{9, "ha.interval", "a number needs a unit"}}},
		{"misses low", haDoc("misses = 1\n", haGroup1), []wantErr{{9, "ha.misses", "1 out of range (want 2..100; default 3)"}}},
		{"misses high", haDoc("misses = 101\n", haGroup1), []wantErr{{9, "ha.misses", "out of range"}}},
		{"hook_timeout", haDoc("hook_timeout = \"50ms\"\n", haGroup1), []wantErr{{9, "ha.hook_timeout", "duration 50ms is below 100ms (want 100ms..1m0s; default 5s)"}}},
		{"hook empty", haDoc("hook = \"\"\n", haGroup1), []wantErr{{9, "ha.hook", "empty file name"}}},
		{"preference", haDoc("preference = 256\n", haGroup1), []wantErr{{9, "ha.preference", "256 out of range (want 0..255, higher wins; default 100)"}}},
		{"group preference", haDoc("", haGroup1+"preference = -1\n"), []wantErr{{12, "ha.group[1].preference", "-1 out of range (want 0..255"}}},
		{"preempt string", haDoc("preempt = \"yes\"\n", haGroup1), []wantErr{{9, "ha.preempt", "want a boolean"}}},
		{"witness name", haDoc("witness = \"witness.example:53\"\n", haGroup1), []wantErr{{9, "ha.witness", `invalid witness "witness.example:53" (want an IP address and TCP port such as 10.0.0.254:53`}}},
		{"witness no port", haDoc("witness = \"10.0.0.254\"\n", haGroup1), []wantErr{{9, "ha.witness", `"10.0.0.254" has no port`}}},
		{"witness unspecified", haDoc("witness = \"0.0.0.0:53\"\n", haGroup1), []wantErr{{9, "ha.witness", "0.0.0.0 is not an address to connect to"}}},

		// Groups and their addresses.
		{"group name", haDoc("", strings.Replace(haGroup1, `"g1"`, `"G 1"`, 1)), []wantErr{{10, "ha.group[1].name", `invalid group name "G 1" (want 1 to 32 of a-z, 0-9 and '-'`}}},
		{"address no dev", haDoc("", strings.Replace(haGroup1, " dev wan0", "", 1)), []wantErr{{11, "ha.group[1].addresses[1]",
			`"192.0.2.1/24" names no device (want "192.0.2.1/24 dev IFNAME": the interface the address goes on)`}}},
		{"address syntax", haDoc("", strings.Replace(haGroup1, " dev wan0", " wan0", 1)), []wantErr{{11, "ha.group[1].addresses[1]",
			`invalid virtual address "192.0.2.1/24 wan0" (want "PREFIX dev IFNAME", such as "192.0.2.10/24 dev wan0")`}}},
		{"address no length", haDoc("", strings.Replace(haGroup1, "/24", "", 1)), []wantErr{{11, "ha.group[1].addresses[1]", "has no prefix length"}}},
		{"address dev long", haDoc("", strings.Replace(haGroup1, "wan0", "wan-uplink-00001", 1)), []wantErr{{11, "ha.group[1].addresses[1]", "16 bytes long (Linux allows at most 15)"}}},
		{"address multicast", haDoc("", strings.Replace(haGroup1, "192.0.2.1/24", "224.0.0.5/24", 1)), []wantErr{{11, "ha.group[1].addresses[1]", "cannot be assigned to an interface"}}},
		{"address twice in group", haDoc("", strings.Replace(haGroup1, `"192.0.2.1/24 dev wan0"`, `"192.0.2.1/24 dev wan0", "192.0.2.1/32 dev wan1"`, 1)),
			[]wantErr{{11, "ha.group[1].addresses[2]", "address 192.0.2.1 is also ha.group[1].addresses[1] (line 11): an address belongs to one group, once"}}},
		{"address in two groups", haDoc("", haGroup1+group("name = \"g2\"\naddresses = [\"2001:db8::1/64 dev wan0\", \"192.0.2.1/24 dev wan0\"]\n")),
			[]wantErr{{14, "ha.group[2].addresses[2]", "address 192.0.2.1 is also ha.group[1].addresses[1] (line 11)"}}},
		{"duplicate group", haDoc("", haGroup1+group("name = \"g1\"\naddresses = [\"192.0.2.9/24 dev wan0\"]\n")),
			[]wantErr{{13, "ha.group[2].name", `duplicate group name "g1": ha.group[1] (line 10) and ha.group[2] (line 13)`}}},
		{"listen is virtual", with("listen", `"192.0.2.1:4510"`), []wantErr{{3, "ha.listen",
			`192.0.2.1 is a virtual address of group "g1" (ha.group[1].addresses[1], line 11): the sync channel needs an address of this member's own`}}},
		{"peer is virtual", with("peer", `"192.0.2.1:4510"`), []wantErr{{4, "ha.peer", `192.0.2.1 is a virtual address of group "g1"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErrors(t, parseGWErrors(t, tt.doc), tt.want)
		})
	}
}

// TestHACheckFiles: the sync channel's certificate, key and CA, and the
// hook, are checked at start with the TLS sections' files, each reported
// at its field.
func TestHACheckFiles(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, _ := ca.Issue(false, "gw-a")
	_, otherKeyPEM, _ := ca.Issue(false, "gw-x")
	cert, key, other, otherKey := filepath.Join(dir, "a.crt"), filepath.Join(dir, "a.key"), filepath.Join(dir, "ca.crt"), filepath.Join(dir, "other.key")
	for f, b := range map[string][]byte{cert: certPEM, key: keyPEM, other: ca.PEM, otherKey: otherKeyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hook := filepath.Join(dir, "hook")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noexec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := func(cert, key, ca, hook string) string {
		d := strings.NewReplacer(`"a.crt"`, `"`+cert+`"`, `"a.key"`, `"`+key+`"`, `"ca.crt"`, `"`+ca+`"`).Replace(haHead)
		if hook != "" {
			d += "hook = \"" + hook + "\"\n"
		}
		return d + haGroup1 + tun1 + sas1
	}
	load := func(t *testing.T, s string) error {
		t.Helper()
		g, err := ParseGateway(filepath.Join(dir, "gw.toml"), []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return g.CheckTLSFiles()
	}
	if err := load(t, doc(cert, key, other, hook)); err != nil {
		t.Fatalf("good files: %v", err)
	}
	errs := asErrors(t, load(t, doc("missing.crt", key, other, filepath.Join(dir, "nohook"))))
	checkErrors(t, errs, []wantErr{
		{5, "ha.cert", "missing.crt: no such file"},
		{9, "ha.hook", "nohook: no such file"},
	})
	errs = asErrors(t, load(t, doc(cert, otherKey, key, noexec)))
	checkErrors(t, errs, []wantErr{
		{6, "ha.key", "the key does not match the certificate"},
		{7, "ha.ca", "no CA certificate"},
		{9, "ha.hook", "is not executable"},
	})
	errs = asErrors(t, load(t, doc(cert, key, other, dir)))
	checkErrors(t, errs, []wantErr{{9, "ha.hook", "is a directory, not a file"}})
}

// TestHAREADME parses the [ha] example of the README, so that it stays a
// valid configuration.
func TestHAREADME(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```toml\n[ha]\n")
	if !ok {
		t.Fatal("README has no ```toml block starting with [ha]")
	}
	block, _, _ = strings.Cut(block, "```")
	g, err := ParseGateway("README.md", []byte("[ha]\n"+block+tun1+sas1))
	if err != nil {
		t.Fatal(err)
	}
	if h := g.HA; h.Name != "a" || len(h.Groups) != 1 || len(h.Groups[0].Addresses) != 3 || h.Witness == "" || h.Hook == "" {
		t.Errorf("README's [ha]: %+v", h)
	}
}

// TestHAExamples loads examples/ha-gateway-a.toml and -b.toml: one pair,
// each the other's peer, the connection in group "site" on both, a the
// more preferred.
func TestHAExamples(t *testing.T) {
	a, err := LoadGateway("../examples/ha-gateway-a.toml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadGateway("../examples/ha-gateway-b.toml")
	if err != nil {
		t.Fatal(err)
	}
	if a.HA.Name != b.HA.PeerName || b.HA.Name != a.HA.PeerName || a.HA.Listen != b.HA.Peer || b.HA.Listen != a.HA.Peer {
		t.Errorf("a's [ha] %+v and b's %+v are not each other's peer", a.HA, b.HA)
	}
	for _, g := range []*Gateway{a, b} {
		if grp := g.HAGroupOf(g.Connections[0].Local); grp != "site" {
			t.Errorf("%s: the connection is in group %q, want site", g.HA.Name, grp)
		}
	}
	if a.HA.Groups[0].Preference <= b.HA.Groups[0].Preference {
		t.Errorf("a's preference %d is not above b's %d", a.HA.Groups[0].Preference, b.HA.Groups[0].Preference)
	}
}

// TestHAGroupWithoutAddresses: a group may have no address yet (no
// addresses key, or an empty list): a fleet renders the group its
// partner owns so while that partner owns no tunnel.
func TestHAGroupWithoutAddresses(t *testing.T) {
	for _, grp := range []string{"[[ha.group]]\nname = \"g2\"\n", "[[ha.group]]\nname = \"g2\"\naddresses = []\n"} {
		g, err := ParseGateway("gw.toml", []byte(haDoc("", haGroup1+grp)))
		if err != nil {
			t.Errorf("%q: %v", grp, err)
			continue
		}
		if len(g.HA.Groups) != 2 || g.HA.Groups[1].Name != "g2" || len(g.HA.Groups[1].Addresses) != 0 {
			t.Errorf("%q: groups %+v", grp, g.HA.Groups)
		}
	}
}
