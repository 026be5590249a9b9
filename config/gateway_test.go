package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
)

var (
	pfx  = netip.MustParsePrefix
	addr = netip.MustParseAddr
)

// TestGatewayExamples loads the example configurations shipped in
// examples/ and checks that they are mirror images of each other, as their
// comments say: what A sends with, B receives with.
func TestGatewayExamples(t *testing.T) {
	a, err := LoadGateway("../examples/gateway-a.toml")
	if err != nil {
		t.Fatalf("gateway-a: %v", err)
	}
	b, err := LoadGateway("../examples/gateway-b.toml")
	if err != nil {
		t.Fatalf("gateway-b: %v", err)
	}
	for _, g := range []*Gateway{a, b} {
		if len(g.Tunnels) != 1 || g.UDP == nil || g.UDP.Listen != netip.MustParseAddrPort("0.0.0.0:4500") || g.RawESP != nil {
			t.Fatalf("%s: want one tunnel over UDP 4500, got %+v", g.File, g)
		}
		tn := &g.Tunnels[0]
		if tn.Encap != EncapUDP || tn.PeerPort != 4500 || len(tn.In) != 1 {
			t.Errorf("%s: tunnel %+v", g.File, tn)
		}
		for _, sa := range []*SA{g.SA(tn.Out), g.SA(tn.In[0])} {
			if sa == nil || sa.Alg != cryptodev.AES128GCM16 || sa.Encap != EncapUDP || sa.Mode != ModeTunnel {
				t.Errorf("%s: SA %v", g.File, sa)
			}
		}
	}
	ta, tb := &a.Tunnels[0], &b.Tunnels[0]
	if ta.Local != addr("192.0.2.1") || ta.Peer != addr("192.0.2.2") || !slices.Equal(ta.Remote, []netip.Prefix{pfx("10.2.0.0/24")}) {
		t.Errorf("site A tunnel %+v", ta)
	}
	if tb.Local != ta.Peer || tb.Peer != ta.Local || !slices.Equal(tb.Remote, []netip.Prefix{pfx("10.1.0.0/24")}) {
		t.Errorf("site B tunnel %+v is not the mirror of %+v", tb, ta)
	}
	if !a.TUN.Addresses[0].Contains(tb.Remote[0].Addr()) || !b.TUN.Addresses[0].Contains(ta.Remote[0].Addr()) {
		t.Errorf("TUN addresses %v, %v do not match the peer's remote", a.TUN.Addresses, b.TUN.Addresses)
	}
	// A's outbound SA is B's inbound SA and the other way round, key for
	// key (Pos aside).
	same := func(x, y *SA) bool {
		x2, y2 := *x, *y
		x2.Pos, y2.Pos = Pos{}, Pos{}
		return reflect.DeepEqual(x2, y2)
	}
	if !same(a.SA(ta.Out), b.SA(tb.In[0])) || !same(a.SA(ta.In[0]), b.SA(tb.Out)) {
		t.Error("the SAs of gateway-a.toml and gateway-b.toml do not mirror each other")
	}
	if bytes.Equal(a.SA(ta.Out).EncKey, a.SA(ta.In[0]).EncKey) {
		t.Error("both directions share one key")
	}
	// The example keys are marked as such.
	for _, f := range []string{"../examples/gateway-a.toml", "../examples/gateway-b.toml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("example only, generate your own with\n# `sluice genkey esp --esp aes128gcm16`")) {
			t.Errorf("%s does not say how to generate keys", f)
		}
	}
}

func TestGatewayValid(t *testing.T) {
	const file = "testdata/gateway-valid.toml"
	g, err := LoadGateway(file)
	if err != nil {
		t.Fatal(err)
	}
	pos := func(line int) Pos { return Pos{File: file, Line: line, Col: 1} }
	if g.File != file || g.Workers != 8 || g.Engine != "sched" || g.ControlSocket != "/tmp/sluice-test.sock" ||
		g.Metrics != "[::1]:9100" || g.LogLevel != "debug" || g.Oversize != OversizeDrop {
		t.Errorf("[gateway]: %+v", g)
	}
	wantTUN := TUN{Name: "gw0", MTU: 1400, Addresses: []netip.Prefix{pfx("10.1.0.1/24"), pfx("2001:db8:1::1/64")}, Queues: 4}
	if !reflect.DeepEqual(g.TUN, wantTUN) {
		t.Errorf("[tun]: got %+v, want %+v", g.TUN, wantTUN)
	}
	if want := (UDP{Listen: netip.MustParseAddrPort("192.0.2.1:4501"), GSO: true, GRO: true, Link: LinkSocket}); g.UDP == nil || *g.UDP != want {
		t.Errorf("[udp]: got %+v, want %+v", g.UDP, want)
	}
	if g.RawESP == nil || g.RawESP.Listen != netip.IPv6Unspecified() {
		t.Errorf("[rawesp]: got %+v", g.RawESP)
	}
	wantTunnels := []Tunnel{
		{
			Name: "to-b", Local: addr("192.0.2.1"), Peer: addr("192.0.2.2"), Encap: EncapUDP, PeerPort: 4600,
			Remote: []netip.Prefix{pfx("10.2.0.0/24"), pfx("10.20.0.0/16")},
			Out:    "a-to-b", In: []string{"b-to-a", "b-to-a-new"}, Engine: "soft", MTU: 1380,
		},
		{
			Name: "to-c", Local: addr("2001:db8::1"), Peer: addr("2001:db8::3"), Encap: EncapNone,
			Out: "a-to-c", In: []string{"c-to-a"},
		},
	}
	if !reflect.DeepEqual(g.Tunnels, wantTunnels) {
		t.Errorf("tunnels:\n got %+v\nwant %+v", g.Tunnels, wantTunnels)
	}
	for i, line := range []int{24, 36} {
		if p := g.FieldPos(elemPath("tunnel", i)); p != pos(line) {
			t.Errorf("tunnel[%d] at %v, want line %d", i+1, p, line)
		}
	}
	wantPolicies := []Policy{
		{Name: "dns", Dst: pfx("10.2.0.53/32"), Proto: ProtoUDP, SPort: [2]uint16{0, 65535}, DPort: [2]uint16{53, 53}, Action: ActionBypass},
		{Name: "web", Src: pfx("10.1.0.0/24"), Dst: pfx("10.2.0.0/24"), Proto: ProtoTCP, SPort: [2]uint16{1024, 65535}, DPort: [2]uint16{443, 443},
			Action: ActionProtect, Tunnel: "to-b"},
		{Src: pfx("2001:db8:1::/48"), Proto: ProtoICMPv6, SPort: [2]uint16{0, 65535}, DPort: [2]uint16{0, 65535}, Action: ActionProtect, Tunnel: "to-c"},
		{Name: "gre", Proto: 47, SPort: [2]uint16{0, 65535}, DPort: [2]uint16{0, 65535}, Action: ActionDiscard},
	}
	if !reflect.DeepEqual(g.Policies, wantPolicies) {
		t.Errorf("policies:\n got %+v\nwant %+v", g.Policies, wantPolicies)
	}
	for i, line := range []int{44, 51, 61, 68} {
		if p := g.FieldPos(elemPath("policy", i)); p != pos(line) {
			t.Errorf("policy[%d] at %v, want line %d", i+1, p, line)
		}
	}
	if len(g.SAs) != 6 {
		t.Fatalf("got %d SAs, want 6", len(g.SAs))
	}
	// The SAs are the SA file's: DecodeSAs does the work.
	out := g.SA("a-to-b")
	if out == nil || out.SPI != 0x1001 || out.SPort != 4501 || out.DPort != 4600 || !bytes.Equal(out.EncKey, seqKey(20, 0)) || out.Pos != pos(74) {
		t.Errorf("a-to-b: %+v", out)
	}
	if sa := g.SA("b-to-a-new"); sa == nil || sa.Alg != cryptodev.ChaCha20Poly1305 {
		t.Errorf("b-to-a-new: %v", sa)
	}
	if g.SA("") != nil || g.SA("nope") != nil {
		t.Error("SA finds what is not there")
	}
	if g.SAs[5].Name != "" || g.SAs[5].Mode != ModeTransport {
		t.Errorf("unused unnamed SA: %v", &g.SAs[5])
	}
	if tn := g.Tunnel("to-c"); tn == nil || tn != &g.Tunnels[1] {
		t.Errorf("Tunnel(to-c) = %p, want %p", tn, &g.Tunnels[1])
	}
	if g.Tunnel("to-x") != nil {
		t.Error("Tunnel finds what is not there")
	}
}

func TestGatewayDefaults(t *testing.T) {
	const file = "testdata/gateway-defaults.toml"
	g, err := LoadGateway(file)
	if err != nil {
		t.Fatal(err)
	}
	if g.Workers != 0 || g.Engine != "" || g.ControlSocket != DefaultControlSocket || g.Metrics != "" ||
		g.LogLevel != "info" || g.Oversize != OversizeFragment {
		t.Errorf("[gateway] defaults: %+v", g)
	}
	if g.TUN.Name != "sluice0" || g.TUN.MTU != 0 || len(g.TUN.Addresses) != 0 || g.TUN.Queues != 0 {
		t.Errorf("[tun] defaults: %+v", g.TUN)
	}
	// A tunnel uses encap = "udp" (the default), so [udp] is supplied.
	if g.UDP == nil || *g.UDP != (UDP{Listen: netip.MustParseAddrPort("0.0.0.0:4500"), GSO: true, GRO: true, Link: LinkAuto}) {
		t.Errorf("[udp] default: %+v", g.UDP)
	}
	if g.RawESP != nil {
		t.Errorf("[rawesp] without a tunnel that needs it: %+v", g.RawESP)
	}
	tn := g.Tunnels[0]
	if tn.Encap != EncapUDP || tn.PeerPort != 4500 || tn.Engine != "" || tn.MTU != 0 || g.FieldPos("tunnel[1]") != (Pos{File: file, Line: 3, Col: 1}) {
		t.Errorf("tunnel defaults: %+v", tn)
	}
	if g.Policies != nil {
		t.Errorf("policies: %v", g.Policies)
	}
}

// gwSA is an [[sa]] table named name for a tunnel with encap = "udp", with
// extra lines after its encap (line 5 of the table).
func gwSA(name string, spi int, extra string) string { return gwSAEncap(name, spi, EncapUDP, extra) }

// gwSAEncap is gwSA with another encap.
func gwSAEncap(name string, spi int, encap Encap, extra string) string {
	return fmt.Sprintf("[[sa]]\nname = %q\nspi = %#x\nencap = %q\n%s%s", name, spi, encap, extra, gcm)
}

// gwTunnel is a [[tunnel]] table of 7 lines; keys written after it belong
// to it.
func gwTunnel(name, local, peer, remote, out, in string) string {
	return fmt.Sprintf("[[tunnel]]\nname = %q\nlocal = %q\npeer = %q\nremote = [%s]\nout = %q\nin = [%s]\n", name, local, peer, remote, out, in)
}

var (
	// tun1 and sas1 make a valid gateway: tun1 is lines 1-7, sas1 12
	// lines.
	tun1 = gwTunnel("t", "192.0.2.1", "192.0.2.2", `"10.2.0.0/24"`, "o", `"i"`)
	sas1 = gwSA("o", 0x1001, "") + gwSA("i", 0x1002, "")
	// tun2 and sas2 are a second tunnel (lines 1-7) and its SAs (12
	// lines).
	tun2 = gwTunnel("u", "192.0.2.1", "192.0.2.3", `"10.3.0.0/24"`, "o2", `"i2"`)
	sas2 = gwSA("o2", 0x2001, "") + gwSA("i2", 0x2002, "")
)

// parseGWErrors parses doc as a gateway configuration and returns its
// errors, failing if there are none.
func parseGWErrors(t *testing.T, doc string) Errors {
	t.Helper()
	g, err := ParseGateway("gw.toml", []byte(doc))
	return failed(t, err, g != nil, "a Gateway", fmt.Sprintf("%+v", g))
}

func TestGatewayBaseIsValid(t *testing.T) {
	for _, doc := range []string{tun1 + sas1, tun1 + tun2 + sas1 + sas2} {
		if _, err := ParseGateway("gw.toml", []byte(doc)); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
	}
}

// TestGatewayEngineComposite: an engine scheduled over another parses as
// one name, for the gateway and for a tunnel.
func TestGatewayEngineComposite(t *testing.T) {
	doc := "[gateway]\nengine = \"sched:ipsecmb\"\n" + tun1 + "engine = \"sched:soft\"\n" + sas1
	g, err := ParseGateway("gw.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if g.Engine != "sched:ipsecmb" || g.Tunnels[0].Engine != "sched:soft" {
		t.Errorf("engines %q, %q", g.Engine, g.Tunnels[0].Engine)
	}
}

// TestGatewayLogKeys: log_format and log_levels parse, and LevelOf
// falls back from a subsystem's level to log_level.
func TestGatewayLogKeys(t *testing.T) {
	doc := "[gateway]\nlog_level = \"warn\"\nlog_format = \"json\"\nlog_levels = { ike = \"debug\", tls = \"error\" }\n" + tun1 + sas1
	g, err := ParseGateway("gw.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if g.LogFormat != LogFormatJSON {
		t.Errorf("log_format %q", g.LogFormat)
	}
	for sub, want := range map[string]string{"ike": "debug", "tls": "error", "dataplane": "warn", "control": "warn", "gateway": "warn"} {
		if got := g.LevelOf(sub); got != want {
			t.Errorf("LevelOf(%s) = %s, want %s", sub, got, want)
		}
	}
	g, err = ParseGateway("gw.toml", []byte(tun1+sas1))
	if err != nil {
		t.Fatal(err)
	}
	if g.LogFormat != LogFormatText || g.LevelOf("ike") != "info" {
		t.Errorf("defaults: format %q, ike %q", g.LogFormat, g.LevelOf("ike"))
	}
}

func TestGatewayErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []wantErr
	}{
		// TOML itself, through ParseDocument.
		{"syntax", "[gateway]\nworkers = \n" + tun1 + sas1, []wantErr{{2, "", "invalid TOML"}}},
		{"duplicate key", "[gateway]\nworkers = 1\nworkers = 2\n" + tun1 + sas1, []wantErr{{3, "", "invalid TOML"}}},

		// Structure.
		{"empty file", "", []wantErr{{1, "tunnel", "no [[tunnel]] or [[connection]]: the gateway needs at least one"}}},
		{"no tunnel", sas1, []wantErr{{1, "tunnel", "no [[tunnel]]"}}},
		{"empty tunnel array", "tunnel = []\n" + sas1, []wantErr{{1, "tunnel", "no [[tunnel]]"}}},
		{"unknown top-level key", "foo = 1\n" + tun1 + sas1, []wantErr{{1, "foo", "unknown key (valid: gateway, tun, udp, rawesp, tunnel, policy, sa, ike, connection, pool, secret, tls, tls_origin, ha)"}}},
		{"unknown section", "[gatway]\nworkers = 1\n" + tun1 + sas1, []wantErr{{1, "gatway", "unknown key"}}},
		{"section case", "[Gateway]\n" + tun1 + sas1, []wantErr{{1, "Gateway", "did you mean gateway?"}}},
		{"gateway array", "[[gateway]]\n" + tun1 + sas1, []wantErr{{1, "gateway", "want a table, got array (write [gateway], not [[gateway]])"}}},
		{"gateway integer", "gateway = 1\n" + tun1 + sas1, []wantErr{{1, "gateway", "want a table, got integer"}}},
		{"tunnel table", "[tunnel]\nname = \"t\"\n" + sas1, []wantErr{{1, "tunnel", "write [[tunnel]], not [tunnel]"}}},
		{"policy table", "[policy]\naction = \"discard\"\n" + tun1 + sas1, []wantErr{{1, "policy", "write [[policy]]"}}},
		{"inline gateway", "gateway = { workers = -1 }\n" + tun1 + sas1, []wantErr{{1, "gateway.workers", "out of range"}}},
		{"unknown gateway key", "[gateway]\nthreads = 4\n" + tun1 + sas1, []wantErr{{2, "gateway.threads", "unknown key (valid: workers, engine, control_socket, metrics, log_level, log_format, log_levels, oversize, state_dir)"}}},
		{"unknown tun key", "[tun]\nnmae = \"x\"\n" + tun1 + sas1, []wantErr{{2, "tun.nmae", "valid: name, mtu, addresses, queues"}}},
		{"unknown udp key", "[udp]\nport = 4500\n" + tun1 + sas1, []wantErr{{2, "udp.port", "valid: listen, gso, gro, link"}}},
		{"unknown rawesp key", "[rawesp]\nlisten = \"0.0.0.0\"\nproto = 50\n" + tun1 + sas1, []wantErr{{3, "rawesp.proto", "valid: listen"}}},
		{"unknown tunnel key", tun1 + "peerport = 4500\n" + sas1, []wantErr{{8, "tunnel[1].peerport", "valid: name, local, peer, encap, peer_port"}}},
		{"tunnel key case", tun1 + "MTU = 1400\n" + sas1, []wantErr{{8, "tunnel[1].MTU", "did you mean mtu?"}}},
		{"unknown policy key", tun1 + "[[policy]]\naction = \"bypass\"\nport = 1\n" + sas1, []wantErr{{10, "policy[1].port", "valid: name, src, dst, proto, sport, dport, action, tunnel"}}},
		{"tunnel subtable", tun1 + "[tunnel.extra]\nx = 1\n" + sas1, []wantErr{{8, "tunnel[1].extra", "unknown key"}}},

		// Types.
		{"workers string", "[gateway]\nworkers = \"4\"\n" + tun1 + sas1, []wantErr{{2, "gateway.workers", "want an integer, got string"}}},
		{"engine integer", "[gateway]\nengine = 1\n" + tun1 + sas1, []wantErr{{2, "gateway.engine", "want a string, got integer"}}},
		{"gso string", "[udp]\ngso = \"yes\"\n" + tun1 + sas1, []wantErr{{2, "udp.gso", "want a boolean"}}},
		{"udp link unknown", "[udp]\nlisten = \"0.0.0.0:4500\"\nlink = \"dpdk\"\n" + tun1 + sas1, []wantErr{{3, "udp.link", `unknown ESP link "dpdk" (valid: auto, AF_XDP where its sockets bind zero-copy and the UDP sockets elsewhere (the default); xdp, AF_XDP in any mode or no start; socket, the UDP sockets only)`}}},
		{"udp link case", "[udp]\nlink = \"XDP\"\n" + tun1 + sas1, []wantErr{{2, "udp.link", `unknown ESP link "XDP"`}}},
		{"udp link bool", "[udp]\nlink = true\n" + tun1 + sas1, []wantErr{{2, "udp.link", "want a string"}}},
		{"addresses string", "[tun]\naddresses = \"10.1.0.1/24\"\n" + tun1 + sas1, []wantErr{{2, "tun.addresses", `want an array of strings, got string (write addresses = ["10.1.0.1/24"])`}}},
		{"addresses element", "[tun]\naddresses = [\"10.1.0.1/24\", 10]\n" + tun1 + sas1, []wantErr{{2, "tun.addresses[2]", "want a string, got integer"}}},
		{"in bare string", strings.Replace(tun1, `in = ["i"]`, `in = "i"`, 1) + sas1, []wantErr{{7, "tunnel[1].in", `got string (write in = ["b-to-a"])`}}},
		{"local integer", strings.Replace(tun1, `local = "192.0.2.1"`, `local = 1`, 1) + sas1, []wantErr{{3, "tunnel[1].local", "want a string, got integer"}}},
		{"remote element", strings.Replace(tun1, `"10.2.0.0/24"`, `"10.2.0.0/24", 1.5`, 1) + sas1, []wantErr{{5, "tunnel[1].remote[2]", "want a string, got float"}}},
		{"mtu float", tun1 + "mtu = 1400.0\n" + sas1, []wantErr{{8, "tunnel[1].mtu", "want an integer, got float"}}},
		{"proto boolean", tun1 + "[[policy]]\nproto = true\naction = \"bypass\"\n" + sas1, []wantErr{{9, "policy[1].proto", "want a string, got boolean"}}},
		{"ports float", tun1 + "[[policy]]\nsport = 1.0\naction = \"bypass\"\n" + sas1, []wantErr{{9, "policy[1].sport", "want a string, got float"}}},

		// [gateway] values.
		{"workers too many", "[gateway]\nworkers = 1025\n" + tun1 + sas1, []wantErr{{2, "gateway.workers", "1025 out of range (want 0..1024; 0 = one per core)"}}},
		{"workers negative", "[gateway]\nworkers = -1\n" + tun1 + sas1, []wantErr{{2, "gateway.workers", "out of range"}}},
		{"engine case", "[gateway]\nengine = \"Soft\"\n" + tun1 + sas1, []wantErr{{2, "gateway.engine", `invalid engine name "Soft" (want a registered engine's lowercase name, such as soft or sched, or sched:ENGINE to schedule another engine's work over all cores; "" lets the registry choose)`}}},
		{"engine composite empty inner", "[gateway]\nengine = \"sched:\"\n" + tun1 + sas1, []wantErr{{2, "gateway.engine", `invalid engine name "sched:"`}}},
		{"engine composite twice", "[gateway]\nengine = \"sched:sched:soft\"\n" + tun1 + sas1, []wantErr{{2, "gateway.engine", `invalid engine name "sched:sched:soft"`}}},
		{"engine spaces", tun1 + "engine = \"soft engine\"\n" + sas1, []wantErr{{8, "tunnel[1].engine", `"" uses the [gateway] engine`}}},
		{"log level", "[gateway]\nlog_level = \"verbose\"\n" + tun1 + sas1, []wantErr{{2, "gateway.log_level", `unknown log level "verbose" (valid: debug, info, warn, error)`}}},
		{"log format", "[gateway]\nlog_format = \"logfmt\"\n" + tun1 + sas1, []wantErr{{2, "gateway.log_format", `unknown log format "logfmt" (valid: text, for logfmt lines; json, for one JSON object a line)`}}},
		{"log levels subsystem", "[gateway]\nlog_levels = { ikev2 = \"debug\" }\n" + tun1 + sas1, []wantErr{{2, "gateway.log_levels.ikev2", "unknown key (valid: ike, tls, dataplane, control, gateway)"}}},
		{"log levels level", "[gateway]\nlog_levels = { ike = 2 }\n" + tun1 + sas1, []wantErr{{2, "gateway.log_levels.ike", "want a string, got integer"}}},
		{"log levels value", "[gateway]\n[gateway.log_levels]\ntls = \"trace\"\n" + tun1 + sas1, []wantErr{{3, "gateway.log_levels.tls", `unknown log level "trace" (valid: debug, info, warn, error)`}}},
		{"log levels string", "[gateway]\nlog_levels = \"debug\"\n" + tun1 + sas1, []wantErr{{2, "gateway.log_levels", "want a table"}}},
		{"log level case", "[gateway]\nlog_level = \"INFO\"\n" + tun1 + sas1, []wantErr{{2, "gateway.log_level", "did you mean info?"}}},
		{"oversize", "[gateway]\noversize = \"frag\"\n" + tun1 + sas1, []wantErr{{2, "gateway.oversize", `unknown oversize action "frag" (valid: fragment,`}}},
		{"metrics no port", "[gateway]\nmetrics = \"9100\"\n" + tun1 + sas1, []wantErr{{2, "gateway.metrics", `invalid listen address "9100"`}}},
		{"metrics port 0", "[gateway]\nmetrics = \":0\"\n" + tun1 + sas1, []wantErr{{2, "gateway.metrics", `invalid port "0"`}}},
		{"metrics port name", "[gateway]\nmetrics = \"localhost:http\"\n" + tun1 + sas1, []wantErr{{2, "gateway.metrics", `invalid port "http"`}}},
		{"metrics host", "[gateway]\nmetrics = \"bad_host:9100\"\n" + tun1 + sas1, []wantErr{{2, "gateway.metrics", `invalid host "bad_host"`}}},
		{"control socket empty", "[gateway]\ncontrol_socket = \"\"\n" + tun1 + sas1, []wantErr{{2, "gateway.control_socket", "empty path"}}},
		{"control socket long", "[gateway]\ncontrol_socket = \"/" + strings.Repeat("s", 107) + "\"\n" + tun1 + sas1, []wantErr{{2, "gateway.control_socket", "108 bytes long; a Unix socket path holds at most 107"}}},

		// [tun], [udp] and [rawesp] values.
		{"tun name long", "[tun]\nname = \"sluice-gateway-0\"\n" + tun1 + sas1, []wantErr{{2, "tun.name", "16 bytes long (Linux allows at most 15)"}}},
		{"tun name slash", "[tun]\nname = \"a/b\"\n" + tun1 + sas1, []wantErr{{2, "tun.name", "invalid interface name"}}},
		{"tun name empty", "[tun]\nname = \"\"\n" + tun1 + sas1, []wantErr{{2, "tun.name", "empty interface name"}}},
		{"tun mtu", "[tun]\nmtu = 100\n" + tun1 + sas1, []wantErr{{2, "tun.mtu", "MTU 100 out of range (want 0 to compute it from the underlay MTU 1500, or 576..65535)"}}},
		{"tun mtu ipv6", "[tun]\nmtu = 1000\naddresses = [\"2001:db8:1::1/64\"]\n" + tun1 + sas1, []wantErr{{2, "tun.mtu", "MTU 1000 is too small: the TUN device has the IPv6 address 2001:db8:1::1/64, and IPv6 needs at least 1280"}}},
		{"tun mtu ipv6 remote", "[tun]\nmtu = 1000\n" + strings.Replace(tun1, `"10.2.0.0/24"`, `"2001:db8:2::/64"`, 1) + sas1, []wantErr{{2, "tun.mtu", `tunnel "t" routes the IPv6 prefix 2001:db8:2::/64`}}},
		{"tun queues", "[tun]\nqueues = 257\n" + tun1 + sas1, []wantErr{{2, "tun.queues", "want 0..256; 0 = one per worker"}}},
		{"tun address without length", "[tun]\naddresses = [\"10.1.0.1\"]\n" + tun1 + sas1, []wantErr{{2, "tun.addresses[1]", `address "10.1.0.1" has no prefix length (want address/length such as 10.1.0.1/24)`}}},
		{"tun address invalid", "[tun]\naddresses = [\"10.1.0.1/24\",\n  \"10.1.0.300/24\"]\n" + tun1 + sas1, []wantErr{{3, "tun.addresses[2]", "invalid address"}}},
		{"tun address duplicate", "[tun]\naddresses = [\"10.1.0.1/24\", \"10.1.0.1/24\"]\n" + tun1 + sas1, []wantErr{{2, "tun.addresses[2]", "duplicate address 10.1.0.1/24 (also tun.addresses[1], line 2)"}}},
		{"tun address multicast", "[tun]\naddresses = [\"224.0.0.1/4\"]\n" + tun1 + sas1, []wantErr{{2, "tun.addresses[1]", "cannot be assigned"}}},
		{"udp listen no port", "[udp]\nlisten = \"0.0.0.0\"\n" + tun1 + sas1, []wantErr{{2, "udp.listen", `"0.0.0.0" has no port (want address:port, e.g. 0.0.0.0:4500)`}}},
		{"udp listen port 0", "[udp]\nlisten = \"0.0.0.0:0\"\n" + tun1 + sas1, []wantErr{{2, "udp.listen", "port 0"}}},
		{"udp listen hostname", "[udp]\nlisten = \"gw.example:4500\"\n" + tun1 + sas1, []wantErr{{2, "udp.listen", "invalid listen address"}}},
		{"rawesp listen port", "[rawesp]\nlisten = \"0.0.0.0:50\"\n" + tun1 + sas1, []wantErr{{2, "rawesp.listen", "has a port, but IP protocol 50 has none"}}},
		{"rawesp listen bad", "[rawesp]\nlisten = \"any\"\n" + tun1 + sas1, []wantErr{{2, "rawesp.listen", "invalid IP address"}}},

		// Tunnels on their own.
		{"tunnel missing everything", "[[tunnel]]\n" + sas1, []wantErr{
			{1, "tunnel[1].name", "missing required key"},
			{1, "tunnel[1].local", "missing required key"},
			{1, "tunnel[1].peer", "missing required key"},
			{1, "tunnel[1].out", "missing required key (the name of the outbound [[sa]])"},
			{1, "tunnel[1].in", "missing required key"},
		}},
		{"tunnel empty name", strings.Replace(tun1, `name = "t"`, `name = ""`, 1) + sas1, []wantErr{{2, "tunnel[1].name", "empty name"}}},
		{"duplicate tunnel name", tun1 + strings.Replace(tun2, `"u"`, `"t"`, 1) + sas1 + sas2, []wantErr{{9, "tunnel[2].name", `duplicate tunnel name "t": tunnel[1] (line 2) and tunnel[2] (line 9)`}}},
		{"local unspecified", strings.Replace(tun1, `"192.0.2.1"`, `"0.0.0.0"`, 1) + sas1, []wantErr{{3, "tunnel[1].local", "0.0.0.0 cannot be a tunnel endpoint"}}},
		{"peer prefix", strings.Replace(tun1, `"192.0.2.2"`, `"192.0.2.0/24"`, 1) + sas1, []wantErr{{4, "tunnel[1].peer", "not a prefix"}}},
		{"peer family", strings.Replace(tun1, `"192.0.2.2"`, `"2001:db8::2"`, 1) + sas1, []wantErr{{4, "tunnel[1].peer", "address family of 2001:db8::2 (IPv6) differs from local 192.0.2.1 (IPv4)"}}},
		{"peer is local", strings.Replace(tun1, `"192.0.2.2"`, `"192.0.2.1"`, 1) + sas1, []wantErr{{4, "tunnel[1].peer", "is the local address too (tunnel[1].local, line 3)"}}},
		{"encap", tun1 + "encap = \"esp\"\n" + sas1, []wantErr{{8, "tunnel[1].encap", "unknown encapsulation"}}},
		{"peer_port with encap none", tun1 + "encap = \"none\"\npeer_port = 4500\n" + gwSAEncap("o", 0x1001, EncapNone, "") + gwSAEncap("i", 0x1002, EncapNone, ""),
			[]wantErr{{9, "tunnel[1].peer_port", "only valid with encap = \"udp\""}}},
		{"peer_port 0", tun1 + "peer_port = 0\n" + sas1, []wantErr{{8, "tunnel[1].peer_port", "want 1..65535"}}},
		{"remote host bits", strings.Replace(tun1, `"10.2.0.0/24"`, `"10.2.0.1/24"`, 1) + sas1, []wantErr{{5, "tunnel[1].remote[1]", "prefix 10.2.0.1/24 has host bits set (did you mean 10.2.0.0/24?)"}}},
		{"remote address", strings.Replace(tun1, `"10.2.0.0/24"`, `"10.2.0.7"`, 1) + sas1, []wantErr{{5, "tunnel[1].remote[1]", `"10.2.0.7" is an address, not a prefix (write 10.2.0.7/32 for the single address)`}}},
		{"remote invalid", strings.Replace(tun1, `"10.2.0.0/24"`, `"10.2.0.0/33"`, 1) + sas1, []wantErr{{5, "tunnel[1].remote[1]", "invalid prefix"}}},
		{"remote 4in6", strings.Replace(tun1, `"10.2.0.0/24"`, `"::ffff:10.2.0.0/120"`, 1) + sas1, []wantErr{{5, "tunnel[1].remote[1]", "IPv4-mapped"}}},
		{"remote duplicate", strings.Replace(tun1, `"10.2.0.0/24"`, `"10.2.0.0/24", "10.2.0.0/24"`, 1) + sas1, []wantErr{{5, "tunnel[1].remote[2]", "duplicate prefix 10.2.0.0/24 (also tunnel[1].remote[1], line 5)"}}},
		{"remote empty", strings.Replace(tun1, `"10.2.0.0/24"`, ``, 1) + sas1, []wantErr{{5, "tunnel[1].remote", `no traffic can enter tunnel "t": it has no remote prefixes and there are no [[policy]] tables`}}},
		{"remote missing", strings.Replace(tun1, "remote = [\"10.2.0.0/24\"]\n", "", 1) + sas1, []wantErr{{1, "tunnel[1].remote", "no traffic can enter"}}},
		{"in empty", strings.Replace(tun1, `in = ["i"]`, `in = []`, 1) + sas1, []wantErr{{7, "tunnel[1].in", "no inbound SA (want 1 to 4 names of [[sa]] tables)"}}},
		{"in five", strings.Replace(tun1, `in = ["i"]`, `in = ["i", "i1", "i2", "i3", "i4"]`, 1) + sas1 +
			gwSA("i1", 0x1003, "") + gwSA("i2", 0x1004, "") + gwSA("i3", 0x1005, "") + gwSA("i4", 0x1006, ""),
			[]wantErr{{7, "tunnel[1].in[5]", "too many inbound SAs: a tunnel has at most 4"}}},
		{"out empty", strings.Replace(tun1, `out = "o"`, `out = ""`, 1) + sas1, []wantErr{{6, "tunnel[1].out", "empty SA name"}}},
		{"tunnel mtu", tun1 + "mtu = 70000\n" + sas1, []wantErr{{8, "tunnel[1].mtu", "MTU 70000 out of range"}}},
		{"tunnel mtu ipv6", strings.Replace(tun1, `"10.2.0.0/24"`, `"10.2.0.0/24", "2001:db8:2::/64"`, 1) + "mtu = 1200\n" + sas1,
			[]wantErr{{8, "tunnel[1].mtu", "MTU 1200 is too small for the IPv6 prefix 2001:db8:2::/64 in remote"}}},

		// Between tunnels.
		{"remote overlap", tun1 + strings.Replace(tun2, `"10.3.0.0/24"`, `"10.0.0.0/8"`, 1) + sas1 + sas2,
			[]wantErr{{12, "tunnel[2].remote[1]", `10.0.0.0/8 overlaps 10.2.0.0/24 of tunnel "t" (tunnel[1].remote[1], line 5): routes into two tunnels would be ambiguous`}}},
		{"remote same prefix", tun1 + strings.Replace(tun2, `"10.3.0.0/24"`, `"10.3.0.0/24", "10.2.0.0/24"`, 1) + sas1 + sas2,
			[]wantErr{{12, "tunnel[2].remote[2]", `overlaps 10.2.0.0/24 of tunnel "t"`}}},
		{"remote takes in the TUN address", "[tun]\naddresses = [\"10.1.0.1/24\"]\n" + strings.Replace(tun1, `"10.2.0.0/24"`, `"10.1.0.0/24"`, 1) + sas1,
			[]wantErr{{7, "tunnel[1].remote[1]", "10.1.0.0/24 takes in 10.1.0.1/24, the TUN device's own address (tun.addresses[1], line 2)"}}},

		// Tunnels and their SAs.
		{"out unknown", strings.Replace(tun1, `out = "o"`, `out = "x"`, 1) + sas1, []wantErr{{6, "tunnel[1].out", `no [[sa]] named "x" (named SAs: "o", "i")`}}},
		{"in unknown, unnamed SA", strings.Replace(tun1, `in = ["i"]`, `in = ["j"]`, 1) + sas1 + "[[sa]]\nspi = 0x1003\n" + gcm,
			[]wantErr{{7, "tunnel[1].in[1]", `no [[sa]] named "j" (named SAs: "o", "i"; 1 [[sa]] without a name cannot be used by a tunnel until it is given one)`}}},
		{"no named SA", tun1 + "[[sa]]\nspi = 0x1003\n" + gcm, []wantErr{
			{6, "tunnel[1].out", "(no [[sa]] in the file has a name; 1 [[sa]] without a name"},
			{7, "tunnel[1].in[1]", "no [[sa]] named \"i\""},
		}},
		{"out is in", strings.Replace(tun1, `in = ["i"]`, `in = ["o"]`, 1) + sas1, []wantErr{{7, "tunnel[1].in[1]", `SA "o" is already the outbound SA of tunnel "t" (tunnel[1].out, line 6): an SA belongs to one tunnel and one direction`}}},
		{"in twice", strings.Replace(tun1, `in = ["i"]`, `in = ["i", "i"]`, 1) + sas1, []wantErr{{7, "tunnel[1].in[2]", `already the inbound SA of tunnel "t" (tunnel[1].in[1], line 7)`}}},
		{"SA of two tunnels", tun1 + strings.Replace(tun2, `out = "o2"`, `out = "o"`, 1) + sas1 + sas2,
			[]wantErr{{13, "tunnel[2].out", `SA "o" is already the outbound SA of tunnel "t"`}}},
		{"outbound src", tun1 + gwSA("o", 0x1001, "src = \"192.0.2.9\"\n") + gwSA("i", 0x1002, ""),
			[]wantErr{{12, "sa[1].src", `src 192.0.2.9 is not the local address 192.0.2.1 of tunnel "t" (tunnel[1].out, line 6), whose outbound SA this is`}}},
		{"outbound dst", tun1 + gwSA("o", 0x1001, "dst = \"192.0.2.1\"\n") + gwSA("i", 0x1002, ""),
			[]wantErr{{12, "sa[1].dst", "dst 192.0.2.1 is not the peer address 192.0.2.2"}}},
		{"inbound src", tun1 + gwSA("o", 0x1001, "") + gwSA("i", 0x1002, "src = \"192.0.2.1\"\n"),
			[]wantErr{{18, "sa[2].src", `src 192.0.2.1 is not the peer address 192.0.2.2 of tunnel "t" (tunnel[1].in[1], line 7), whose inbound SA this is`}}},
		{"inbound dst", tun1 + gwSA("o", 0x1001, "") + gwSA("i", 0x1002, "dst = \"192.0.2.2\"\n"),
			[]wantErr{{18, "sa[2].dst", "dst 192.0.2.2 is not the local address 192.0.2.1"}}},
		{"SA transport", tun1 + gwSA("o", 0x1001, "mode = \"transport\"\n") + gwSA("i", 0x1002, ""),
			[]wantErr{{12, "sa[1].mode", `mode "transport", but tunnel "t" (tunnel[1].out, line 6) uses this SA: a tunnel's SAs need mode = "tunnel"`}}},
		{"SA encap default", tun1 + gwSA("o", 0x1001, "") + "[[sa]]\nname = \"i\"\nspi = 0x1002\n" + gcm,
			[]wantErr{{14, "sa[2].encap", `encap "none" (the SA file's default), but tunnel "t" (tunnel[1].in[1], line 7) has encap = "udp"`}}},
		{"SA encap given", tun1 + "encap = \"none\"\n" + gwSA("o", 0x1001, "") + gwSA("i", 0x1002, ""), []wantErr{
			{12, "sa[1].encap", `encap "udp", but tunnel "t" (tunnel[1].out, line 6) has encap = "none"`},
			{18, "sa[2].encap", `encap "udp"`},
		}},
		{"SA dport", tun1 + "peer_port = 4501\n" + sas1, []wantErr{{9, "sa[1].dport", `dport 4500 is not the peer_port 4501 of tunnel "t" (tunnel[1].out, line 6), whose outbound SA this is`}}},
		{"SA sport", "[udp]\nlisten = \"0.0.0.0:4501\"\n" + tun1 + sas1, []wantErr{{10, "sa[1].sport", `sport 4500 is not the port of udp.listen 0.0.0.0:4501 (udp.listen, line 2), which the outbound SA of tunnel "t"`}}},
		{"SA ports right", "[udp]\nlisten = \"0.0.0.0:4501\"\n" + tun1 + "peer_port = 4502\n" + gwSA("o", 0x1001, "sport = 4501\ndport = 4502\n") + gwSA("i", 0x1002, "sport = 1\ndport = 2\n") + "x = 1\n",
			[]wantErr{{27, "sa[2].x", "unknown key"}}},
		{"inbound SPI shared", tun1 + strings.Replace(tun2, `local = "192.0.2.1"`, `local = "192.0.2.5"`, 1) + gwSA("o", 0x1001, "") + gwSA("i", 0x1002, "dst = \"192.0.2.1\"\n") + gwSA("o2", 0x2001, "") + gwSA("i2", 0x1002, "dst = \"192.0.2.5\"\n"),
			[]wantErr{{36, "sa[4].spi", `inbound SPI 0x00001002 is also the SPI of sa[2] "i" (line 23), another inbound SA: the gateway finds inbound SAs by SPI alone`}}},
		{"SA errors do not cascade", tun1 + gwSA("o", 0x1001, "mode = \"tunel\"\nsrc = \"192.0.2.9\"\n") + gwSA("i", 0x1002, ""),
			[]wantErr{{12, "sa[1].mode", "unknown mode"}}},
		{"SA file errors", tun1 + gwSA("o", 0x1001, "") + "[[sa]]\nname = \"i\"\nspi = 1\nencap = \"udp\"\n" + gcm,
			[]wantErr{{16, "sa[2].spi", "out of range"}}},
		{"sa is a table", tun1 + "[sa]\nspi = 0x1001\n", []wantErr{
			{6, "tunnel[1].out", `no [[sa]] named "o"`}, {7, "tunnel[1].in[1]", `no [[sa]] named "i"`}, {8, "sa", "write [[sa]]"},
		}},

		// Sockets and the tunnels' outer addresses.
		{"udp listen elsewhere", "[udp]\nlisten = \"192.0.2.9:4500\"\n" + tun1 + sas1, []wantErr{{5, "tunnel[1].local", "local 192.0.2.1 is not udp.listen 192.0.2.9 (udp.listen, line 2): the tunnel sends and receives on that socket"}}},
		{"udp listen IPv4 only", "[udp]\ngso = true\n" + strings.NewReplacer(`"192.0.2.1"`, `"2001:db8::1"`, `"192.0.2.2"`, `"2001:db8::2"`).Replace(tun1) + sas1,
			[]wantErr{}},
		{"udp listen IPv4 given", "[udp]\nlisten = \"0.0.0.0:4500\"\n" + strings.NewReplacer(`"192.0.2.1"`, `"2001:db8::1"`, `"192.0.2.2"`, `"2001:db8::2"`).Replace(tun1) + sas1,
			[]wantErr{{5, "tunnel[1].local", "IPv6 local address 2001:db8::1, but udp.listen 0.0.0.0:4500 (udp.listen, line 2) takes IPv4 only: listen on :: for both families"}}},
		{"rawesp listen elsewhere", "[rawesp]\nlisten = \"192.0.2.9\"\n" + tun1 + "encap = \"none\"\n" + gwSAEncap("o", 0x1001, EncapNone, "") + gwSAEncap("i", 0x1002, EncapNone, ""),
			[]wantErr{{5, "tunnel[1].local", "local 192.0.2.1 is not rawesp.listen 192.0.2.9 (rawesp.listen, line 2)"}}},

		// Policies.
		{"policy action missing", tun1 + "[[policy]]\nname = \"p\"\n" + sas1, []wantErr{{8, "policy[1].action", "missing required key (protect, bypass or discard)"}}},
		{"policy action unknown", tun1 + "[[policy]]\naction = \"allow\"\n" + sas1, []wantErr{{9, "policy[1].action", `unknown action "allow" (valid: protect, bypass, discard)`}}},
		{"protect without tunnel", tun1 + "[[policy]]\naction = \"protect\"\n" + sas1, []wantErr{{8, "policy[1].tunnel", `missing required key for action = "protect"`}}},
		{"bypass with tunnel", tun1 + "[[policy]]\naction = \"bypass\"\ntunnel = \"t\"\n" + sas1, []wantErr{{10, "policy[1].tunnel", `action "bypass" takes no tunnel (only protect does)`}}},
		{"policy tunnel unknown", tun1 + "[[policy]]\naction = \"protect\"\ntunnel = \"x\"\n" + sas1, []wantErr{{10, "policy[1].tunnel", `no [[tunnel]] named "x" (tunnels: "t")`}}},
		{"policy tunnel empty", tun1 + "[[policy]]\naction = \"protect\"\ntunnel = \"\"\n" + sas1, []wantErr{{10, "policy[1].tunnel", "empty tunnel name"}}},
		{"policy empty name", tun1 + "[[policy]]\nname = \"\"\naction = \"discard\"\n" + sas1, []wantErr{{9, "policy[1].name", "empty name"}}},
		{"policy duplicate name", tun1 + "[[policy]]\nname = \"p\"\naction = \"discard\"\n[[policy]]\nname = \"p\"\naction = \"bypass\"\n" + sas1,
			[]wantErr{{12, "policy[2].name", `duplicate policy name "p": policy[1] (line 9) and policy[2] (line 12)`}}},
		{"ports with icmp", tun1 + "[[policy]]\nproto = \"icmp\"\nsport = \"any\"\ndport = \"80\"\naction = \"discard\"\n" + sas1,
			[]wantErr{{11, "policy[1].dport", "ports with proto icmp, which has none (ports need tcp, udp, sctp or any)"}}},
		{"ports with number", tun1 + "[[policy]]\nproto = 47\nsport = 1\naction = \"discard\"\n" + sas1,
			[]wantErr{{10, "policy[1].sport", "ports with proto 47"}}},
		{"ports with any", tun1 + "[[policy]]\nsport = \"1-2\"\naction = \"discard\"\nfoo = 1\n" + sas1, []wantErr{{11, "policy[1].foo", "unknown key"}}},
		{"proto case", tun1 + "[[policy]]\nproto = \"TCP\"\naction = \"discard\"\n" + sas1, []wantErr{{9, "policy[1].proto", "did you mean tcp?"}}},
		{"proto unknown", tun1 + "[[policy]]\nproto = \"gre\"\naction = \"discard\"\n" + sas1, []wantErr{{9, "policy[1].proto", `unknown protocol "gre" (valid: any, tcp, udp, icmp, icmpv6, sctp, or a protocol number 0..255)`}}},
		{"proto 256", tun1 + "[[policy]]\nproto = 256\naction = \"discard\"\n" + sas1, []wantErr{{9, "policy[1].proto", "protocol 256 out of range"}}},
		{"proto string 256", tun1 + "[[policy]]\nproto = \"256\"\naction = \"discard\"\n" + sas1, []wantErr{{9, "policy[1].proto", "unknown protocol"}}},
		{"port invalid", tun1 + "[[policy]]\nproto = \"tcp\"\nsport = \"80-\"\naction = \"discard\"\n" + sas1, []wantErr{{10, "policy[1].sport", `invalid port selector "80-"`}}},
		{"port reversed", tun1 + "[[policy]]\ndport = \"2000-1000\"\naction = \"discard\"\n" + sas1, []wantErr{{9, "policy[1].dport", `port range "2000-1000" is reversed (want low-high, e.g. 1000-2000)`}}},
		{"port too big", tun1 + "[[policy]]\ndport = 65536\naction = \"discard\"\n" + sas1, []wantErr{{9, "policy[1].dport", "port 65536 out of range"}}},
		{"port string too big", tun1 + "[[policy]]\ndport = \"65536\"\naction = \"discard\"\n" + sas1, []wantErr{{9, "policy[1].dport", "invalid port selector"}}},
		{"selector family", tun1 + "[[policy]]\nsrc = \"10.1.0.0/24\"\ndst = \"2001:db8::/32\"\naction = \"discard\"\n" + sas1,
			[]wantErr{{10, "policy[1].dst", "address family of 2001:db8::/32 (IPv6) differs from src 10.1.0.0/24 (IPv4)"}}},
		{"selector host bits", tun1 + "[[policy]]\nsrc = \"10.1.0.1/24\"\naction = \"discard\"\n" + sas1, []wantErr{{9, "policy[1].src", "did you mean 10.1.0.0/24?"}}},
		{"selector invalid", tun1 + "[[policy]]\ndst = \"web\"\naction = \"discard\"\n" + sas1, []wantErr{{9, "policy[1].dst", `invalid selector "web"`}}},
		{"icmp with IPv6", tun1 + "[[policy]]\ndst = \"2001:db8::/32\"\nproto = \"icmp\"\naction = \"discard\"\n" + sas1, []wantErr{{10, "policy[1].proto", "whose ICMP is icmpv6 (58)"}}},
		{"icmpv6 with IPv4", tun1 + "[[policy]]\ndst = \"10.0.0.0/8\"\nproto = 58\naction = \"discard\"\n" + sas1, []wantErr{{10, "policy[1].proto", "whose ICMP is icmp (1)"}}},
		{"tunnel no policy protects", strings.Replace(tun1, `"10.2.0.0/24"`, ``, 1) + "[[policy]]\naction = \"discard\"\n" + sas1,
			[]wantErr{{5, "tunnel[1].remote", "no traffic can enter tunnel \"t\": it has no remote prefixes and no [[policy]] protects into it"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.want) == 0 {
				if _, err := ParseGateway("gw.toml", []byte(tt.doc)); err != nil {
					t.Fatalf("want no error, got:\n%v", err)
				}
				return
			}
			errs := parseGWErrors(t, tt.doc)
			checkErrors(t, errs, tt.want)
			lines := strings.Count(tt.doc, "\n") + 1
			for _, e := range errs {
				if e.Pos.File != "gw.toml" || e.Pos.Line < 1 || e.Pos.Line > lines || e.Pos.Col < 1 {
					t.Errorf("bad position in %v", e)
				}
			}
		})
	}
}

// TestManyTunnels parses a large configuration, and the same with an error
// in every tunnel, to keep the checks between tables from growing out of
// hand.
func TestManyTunnels(t *testing.T) {
	const n = 2000
	var good, bad strings.Builder
	for i := range n {
		tn := gwTunnel(fmt.Sprintf("t%d", i), "192.0.2.1", fmt.Sprintf("198.51.%d.%d", i/250, i%250+1),
			fmt.Sprintf(`"10.%d.%d.0/24"`, i/256, i%256), fmt.Sprintf("o%d", i), fmt.Sprintf(`"i%d"`, i))
		good.WriteString(tn)
		bad.WriteString(tn + "mtu = 1\n")
	}
	for i := range n {
		sas := gwSA(fmt.Sprintf("o%d", i), 0x10000+2*i, "") + gwSA(fmt.Sprintf("i%d", i), 0x10001+2*i, "")
		good.WriteString(sas)
		bad.WriteString(sas)
	}
	g, err := ParseGateway("many.toml", []byte(good.String()))
	if err != nil || len(g.Tunnels) != n || len(g.SAs) != 2*n {
		t.Fatalf("got %v", err)
	}
	_, err = ParseGateway("many.toml", []byte(bad.String()))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != n {
		t.Fatalf("got %d errors, want %d", len(errs), n)
	}
}

// TestGatewayIPv6Defaults checks that the sockets a tunnel needs default to
// the unspecified address of its family.
func TestGatewayIPv6Defaults(t *testing.T) {
	v6 := strings.NewReplacer(`"192.0.2.1"`, `"2001:db8::1"`, `"192.0.2.2"`, `"2001:db8::2"`).Replace(tun1)
	g, err := ParseGateway("gw.toml", []byte(v6+sas1))
	if err != nil {
		t.Fatal(err)
	}
	if g.UDP == nil || g.UDP.Listen != netip.MustParseAddrPort("[::]:4500") {
		t.Errorf("UDP = %+v, want [::]:4500", g.UDP)
	}
	none := gwSAEncap("o", 0x1001, EncapNone, "") + gwSAEncap("i", 0x1002, EncapNone, "")
	g, err = ParseGateway("gw.toml", []byte(v6+"encap = \"none\"\n"+none))
	if err != nil {
		t.Fatal(err)
	}
	if g.UDP != nil || g.RawESP == nil || g.RawESP.Listen != netip.IPv6Unspecified() {
		t.Errorf("UDP = %+v, RawESP = %+v; want only RawESP on ::", g.UDP, g.RawESP)
	}
	g, err = ParseGateway("gw.toml", []byte("[rawesp]\n"+tun1+"encap = \"none\"\n"+none))
	if err != nil {
		t.Fatal(err)
	}
	if g.RawESP == nil || g.RawESP.Listen != netip.IPv4Unspecified() {
		t.Errorf("RawESP = %+v, want 0.0.0.0", g.RawESP)
	}
}

func TestGatewayErrorsFile(t *testing.T) {
	_, err := LoadGateway("testdata/gateway-errors.toml")
	errs := asErrors(t, err)
	checkErrors(t, errs, []wantErr{
		{3, "gateway.workers", "2000 out of range"},
		{4, "gateway.log_level", `unknown log level "verbose"`},
		{5, "gateway.colour", "unknown key"},
		{8, "tun.addresses[1]", "no prefix length"},
		{22, "tunnel[2].name", `duplicate tunnel name "to-b": tunnel[1] (line 14) and tunnel[2] (line 22)`},
		{25, "tunnel[2].remote[1]", `10.2.0.0/16 overlaps 10.2.0.0/24 of tunnel "to-b" (tunnel[1].remote[1], line 17)`},
		{26, "tunnel[2].out", `no [[sa]] named "a-to-c" (named SAs: "a-to-b", "b-to-a"; 1 [[sa]] without a name`},
		{27, "tunnel[2].in[1]", `SA "b-to-a" is already the inbound SA of tunnel "to-b" (tunnel[1].in[1], line 19)`},
		{29, "policy[1].tunnel", "missing required key"},
		{32, "policy[1].dport", "ports with proto icmp"},
		{39, "sa[1].dst", "dst 192.0.2.9 is not the peer address 192.0.2.2"},
		{44, "sa[2].encap", `encap "none" (the SA file's default), but tunnel "to-b"`},
		{47, "sa[2].mode", `mode "transport"`},
		{52, "sa[3].spi", "out of range"},
	})
	const first = "testdata/gateway-errors.toml:3:11: gateway.workers: 2000 out of range (want 0..1024; 0 = one per core)"
	if !strings.HasPrefix(err.Error(), first+"\n") {
		t.Errorf("Error() starts\n%s\nwant\n%s", strings.SplitN(err.Error(), "\n", 2)[0], first)
	}
}

func TestLoadGatewayMissing(t *testing.T) { checkLoadMissing(t, LoadGateway) }

func TestGatewayFieldPos(t *testing.T) {
	const file = "testdata/gateway-valid.toml"
	g, err := LoadGateway(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		field     string
		line, col int
	}{
		{"gateway.engine", 4, 10},
		{"tunnel[1].local", 26, 9},
		{"tunnel[1].remote[2]", 30, 26},
		{"tunnel[2].engine", 36, 1}, // left out: its table
		{"policy[2].tunnel", 59, 10},
		{"sa[1].enc_key", 83, 11},
		{"udp", 16, 1},
		{"nothing.at.all", 1, 1},
		{"", 1, 1},
	} {
		if got, want := g.FieldPos(tt.field), (Pos{File: file, Line: tt.line, Col: tt.col}); got != want {
			t.Errorf("FieldPos(%q) = %v, want %v", tt.field, got, want)
		}
	}
}

func TestGatewayCheckEngines(t *testing.T) {
	g, err := LoadGateway("testdata/gateway-valid.toml")
	if err != nil {
		t.Fatal(err)
	}
	// registered is a stand-in for cryptodev.CheckEngine.
	registered := func(names ...string) func(string) error {
		return func(name string) error {
			outer, inner, composite := strings.Cut(name, ":")
			if !slices.Contains(names, outer) {
				return fmt.Errorf("cryptodev: engine %q is not registered (registered: %s)", outer, strings.Join(names, ", "))
			}
			if composite && !slices.Contains(names, inner) {
				return fmt.Errorf("cryptodev: inner engine %q in %q is not registered (registered: %s)", inner, name, strings.Join(names, ", "))
			}
			return nil
		}
	}
	if err := g.CheckEngines(registered("sched", "soft")); err != nil {
		t.Errorf("both registered: %v", err)
	}
	err = g.CheckEngines(registered("soft"))
	want := `testdata/gateway-valid.toml:4:10: gateway.engine: engine "sched" is not registered (registered: soft)`
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	g.Engine = "sched:ipsecmb"
	err = g.CheckEngines(registered("sched", "soft"))
	want = `testdata/gateway-valid.toml:4:10: gateway.engine: inner engine "ipsecmb" in "sched:ipsecmb" is not registered (registered: sched, soft)`
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	g.Engine = "sched"
	err = g.CheckEngines(registered())
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 2 || errs[1].Field != "tunnel[1].engine" || errs[1].Pos.Line != 33 {
		t.Errorf("got %v", err)
	}
}

func FuzzParseGateway(f *testing.F) {
	files, _ := filepath.Glob("testdata/gateway*.toml")
	examples, _ := filepath.Glob("../examples/*.toml")
	files = append(files, examples...)
	addSeeds(f, files, []string{
		"",
		raDoc,
		tun1 + sas1,
		tun1 + tun2 + sas1 + sas2,
		"[[tunnel]]\n[[policy]]\n[[sa]]\n[udp]\n[rawesp]\n[tun]\n[gateway]\n",
		"tunnel = [{name = \"t\", local = \"::1\", peer = \"::2\", encap = \"none\", remote = [\"::/0\"], out = \"o\", in = [\"o\"]}]\n",
		tun1 + "[[policy]]\nproto = \"tcp\"\nsport = \"0-65535\"\ndport = 7\naction = \"protect\"\ntunnel = \"t\"\n" + sas1,
		"[tun]\naddresses = [[1], {}, \"\"]\n[[tunnel]]\nin = [[], 1, \"\", \"a\", \"b\", \"c\", \"d\"]\n",
		tls1 + cert1 + orig1,
		tun1 + sas1 + tls1 + "versions = [\"1.3\"]\nclient_auth = \"require\"\nclient_ca = \"c\"\n" + cert1,
		"[[tls]]\n[[tls.cert]]\n[[tls_origin]]\ncert = \"\"\nkey = 1\n[tls]\n",
		haDoc("", haGroup1),
		"[ha]\nlisten = \"[::]:1\"\npeer = \"[::1]:1\"\ngroup = [{}, 1, {name = \"g\", addresses = [1, \"x dev y\", \"::1/128 dev lo\"]}]\n",
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGateway("fuzz.toml", data)
		if err != nil {
			if g != nil {
				t.Fatal("Gateway returned with an error")
			}
			checkFuzzErrors(t, "fuzz.toml", data, err)
			return
		}
		checkGatewayInvariants(t, g)
		checkRoundTrip(t, g)
	})
}

// checkRoundTrip checks that g, written back by the rule tables'
// encoder, parses to g again.
func checkRoundTrip(t *testing.T, g *Gateway) {
	t.Helper()
	if g.HA != nil && (g.HA.Preference == 0 || slices.ContainsFunc(g.HA.Groups, func(h HAGroup) bool { return h.Preference == 0 })) {
		return // File leaves a preference of 0 out
	}
	text, err := g.ToFile().Encode()
	if err != nil {
		t.Fatalf("ToFile().Encode(): %v", err)
	}
	g2, err := ParseGateway(g.File, text)
	if err != nil {
		t.Fatalf("the written configuration does not parse: %v\n%s", err, text)
	}
	if a, b := emptyAsNil(withoutPositions(g)), emptyAsNil(withoutPositions(g2)); !reflect.DeepEqual(a, b) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v\n%s", b, a, text)
	}
}

// emptyAsNil makes the empty slices and maps of g nil: the file says the
// same with "addresses = []" as with no addresses.
func emptyAsNil(g *Gateway) *Gateway {
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		case reflect.Slice, reflect.Map:
			if v.Len() == 0 {
				v.Set(reflect.Zero(v.Type()))
				return
			}
			if v.Kind() == reflect.Slice {
				for i := range v.Len() {
					walk(v.Index(i))
				}
			}
		}
	}
	walk(reflect.ValueOf(g))
	return g
}

// checkGatewayInvariants checks what ParseGateway promises of a Gateway it
// returns.
func checkGatewayInvariants(t *testing.T, g *Gateway) {
	t.Helper()
	if g.Workers < 0 || g.Workers > MaxWorkers || g.TUN.Queues < 0 || g.TUN.Queues > MaxTUNQueues ||
		!slices.Contains(logLevels, g.LogLevel) || !slices.Contains(oversizes, g.Oversize) || g.TUN.Name == "" || g.ControlSocket == "" {
		t.Fatalf("invalid [gateway] or [tun] accepted: %+v", g)
	}
	if len(g.Tunnels) == 0 {
		if g.IKEOnly() || g.EmptyIPsec() {
			checkTLSInvariants(t, g)
		} else {
			checkTLSOnlyInvariants(t, g)
		}
		return
	}
	checkTLSInvariants(t, g)
	usedSAs := make(map[*SA]bool)
	use := func(name string) *SA {
		sa := g.SA(name)
		if sa == nil || usedSAs[sa] || sa.Mode != ModeTunnel {
			t.Fatalf("SA %q missing, reused or not in tunnel mode", name)
		}
		usedSAs[sa] = true
		return sa
	}
	for i := range g.Tunnels {
		tn := &g.Tunnels[i]
		if tn.Name == "" || g.Tunnel(tn.Name) != tn || !tn.Local.IsValid() || tn.Local.Is4() != tn.Peer.Is4() ||
			len(tn.In) < 1 || len(tn.In) > MaxInboundSAs || (tn.Encap == EncapUDP) != (tn.PeerPort != 0) {
			t.Fatalf("invalid tunnel accepted: %+v", tn)
		}
		switch tn.Encap {
		case EncapUDP:
			if g.UDP == nil {
				t.Fatal("udp tunnel without [udp]")
			}
		case EncapNone:
			if g.RawESP == nil {
				t.Fatal("raw ESP tunnel without [rawesp]")
			}
		default:
			t.Fatalf("encap %q", tn.Encap)
		}
		for _, sa := range append([]*SA{use(tn.Out)}, func() (in []*SA) {
			for _, n := range tn.In {
				in = append(in, use(n))
			}
			return in
		}()...) {
			if sa.Encap != tn.Encap {
				t.Fatalf("SA %q encap %q in tunnel %q with %q", sa.Name, sa.Encap, tn.Name, tn.Encap)
			}
		}
		for _, p := range tn.Remote {
			if p != p.Masked() {
				t.Fatalf("unmasked remote %v", p)
			}
			for j := range g.Tunnels[:i] {
				for _, q := range g.Tunnels[j].Remote {
					if p.Overlaps(q) {
						t.Fatalf("overlapping remotes %v and %v accepted", p, q)
					}
				}
			}
		}
	}
	for _, p := range g.Policies {
		if (p.Action == ActionProtect) != (g.Tunnel(p.Tunnel) != nil) || !slices.Contains(actions, p.Action) ||
			p.SPort[0] > p.SPort[1] || p.DPort[0] > p.DPort[1] ||
			(p.Src.IsValid() && p.Dst.IsValid() && p.Src.Addr().Is4() != p.Dst.Addr().Is4()) {
			t.Fatalf("invalid policy accepted: %+v", p)
		}
	}
}

// TestGatewayByteOrderMark: a file that a Windows editor saved with a
// UTF-8 byte-order mark parses as without it, and its errors have the
// columns the editor shows (it used to be refused as "invalid character
// U+00EF").
func TestGatewayByteOrderMark(t *testing.T) {
	text, err := os.ReadFile("../examples/gateway-a.toml")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := ParseGateway("a.toml", text)
	if err != nil {
		t.Fatal(err)
	}
	bom, err := ParseGateway("a.toml", append([]byte("\xef\xbb\xbf"), text...))
	if err != nil {
		t.Fatalf("with a byte-order mark: %v", err)
	}
	if len(bom.Tunnels) != len(plain.Tunnels) || len(bom.SAs) != len(plain.SAs) || bom.StateDir != plain.StateDir {
		t.Errorf("with a byte-order mark: %+v, without: %+v", bom, plain)
	}
	_, err = ParseGateway("bad.toml", []byte("\xef\xbb\xbf[gateway]\nworkers = \"many\"\n"))
	if err == nil || !strings.Contains(err.Error(), "\nbad.toml:2:11: gateway.workers:") {
		t.Errorf("error after a byte-order mark: %v", err)
	}
}

// TestUDPLink: [udp] link reads auto, xdp and socket (auto when left
// out, also in the [udp] supplied for a tunnel), and the encoder writes
// it back only when it is not the default.
func TestUDPLink(t *testing.T) {
	for _, tc := range []struct{ text, want, encoded string }{
		{"", LinkAuto, ""},
		{"[udp]\nlisten = \"0.0.0.0:4500\"\n", LinkAuto, ""},
		{"[udp]\nlink = \"auto\"\n", LinkAuto, ""},
		{"[udp]\nlink = \"xdp\"\n", LinkXDP, `link = 'xdp'`},
		{"[udp]\nlink = \"socket\"\n", LinkSocket, `link = 'socket'`},
	} {
		g, err := ParseGateway("link.toml", []byte(tc.text+tun1+sas1))
		if err != nil {
			t.Fatalf("%q: %v", tc.text, err)
		}
		if g.UDP == nil || g.UDP.Link != tc.want {
			t.Fatalf("%q: [udp] %+v, want link %q", tc.text, g.UDP, tc.want)
		}
		text, err := g.ToFile().Encode()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(text), "link = "); got != (tc.encoded != "") || !strings.Contains(string(text), tc.encoded) {
			t.Errorf("%q encodes to\n%s\nwant %q", tc.text, text, tc.encoded)
		}
		g2, err := ParseGateway("link2.toml", text)
		if err != nil {
			t.Fatalf("%q: encoded text: %v", tc.text, err)
		}
		if g2.UDP.Link != tc.want {
			t.Errorf("%q: round trip link %q, want %q", tc.text, g2.UDP.Link, tc.want)
		}
	}
}
