package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/pipe"
	"github.com/sluicegw/sluice/pktio/xdp"
)

// xdpTestConfig is a gateway with [udp] and one tunnel from 192.0.2.1
// (127.0.0.1 with listen on that address); udp is the text of its [udp]
// section.
func xdpTestConfig(t *testing.T, udp string) *config.Gateway {
	t.Helper()
	text := udp + `
[[tunnel]]
name = "t"
local = "192.0.2.1"
peer = "192.0.2.2"
remote = ["10.2.0.0/24"]
out = "o"
in = ["i"]

[[sa]]
name = "o"
spi = 0x1001
encap = "udp"
esp = "aes128gcm16"
enc_key = "000102030405060708090a0b0c0d0e0f10111213"

[[sa]]
name = "i"
spi = 0x1002
encap = "udp"
esp = "aes128gcm16"
enc_key = "101112131415161718191a1b1c1d1e1f20212223"
`
	if strings.Contains(udp, "127.0.0.1") {
		text = strings.Replace(text, "192.0.2.1", "127.0.0.1", 1)
	}
	cfg, err := config.ParseGateway("gw.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// fakeInterfaces puts 192.0.2.1 on wan0, 198.51.100.1 on wan1 and
// 127.0.0.1 on lo in place of the host's interfaces.
func fakeInterfaces(t *testing.T) {
	old := lookupInterface
	t.Cleanup(func() { lookupInterface = old })
	lookupInterface = func(a netip.Addr) (string, bool, error) {
		switch a.String() {
		case "192.0.2.1", "2001:db8::1":
			return "wan0", false, nil
		case "198.51.100.1":
			return "wan1", false, nil
		case "127.0.0.1":
			return "lo", true, nil
		}
		return "", false, fmt.Errorf("no interface holds %v", a)
	}
}

// withXDP puts open and mode in the place of pktio/xdp's.
func withXDP(t *testing.T, open func(string, xdpRequest) ([]pktio.Link, error), mode string) {
	oldOpen, oldMode, oldZC := xdpOpen, xdpMode, xdpZeroCopy
	t.Cleanup(func() { xdpOpen, xdpMode, xdpZeroCopy = oldOpen, oldMode, oldZC })
	xdpOpen = open
	xdpMode = func(pktio.Link) string { return mode }
	// The kernel does not say (as before Linux 6.3): Open's mode decides.
	xdpZeroCopy = func(string) (bool, error) { return false, xdp.ErrNoFeatures }
}

// testSockets are n pipes standing for the UDP sockets of udp.OpenN: the
// gateway's ends and the far ends.
func testSockets(t *testing.T, n int) (near, far []pktio.Link) {
	for range n {
		a, b := pipe.New(16)
		t.Cleanup(func() { a.Close() })
		near, far = append(near, a), append(far, b)
	}
	return near, far
}

func espTestGateway() (*Gateway, *logBuffer) {
	logs := new(logBuffer)
	return &Gateway{log: slog.New(slog.NewTextHandler(logs, nil))}, logs
}

// TestXDPInterfaceRule: AF_XDP goes on the interface holding [udp]
// listen's address; with a wildcard listen, on the one holding the local
// addresses of the tunnels in UDP and of the connections. No address, two
// interfaces or a loopback are refused with the reason.
func TestXDPInterfaceRule(t *testing.T) {
	fakeInterfaces(t)
	tun := func(local string, encap config.Encap) config.Tunnel {
		return config.Tunnel{Local: netip.MustParseAddr(local), Encap: encap}
	}
	for _, tc := range []struct {
		name    string
		listen  string
		tunnels []config.Tunnel
		conns   []config.Connection
		want    string // interface, or a part of the error
	}{
		{"listen address", "192.0.2.1:4500", []config.Tunnel{tun("198.51.100.1", config.EncapUDP)}, nil, "wan0"},
		{"wildcard, tunnel", "0.0.0.0:4500", []config.Tunnel{tun("192.0.2.1", config.EncapUDP)}, nil, "wan0"},
		{"wildcard, two tunnels", "[::]:4500", []config.Tunnel{tun("192.0.2.1", config.EncapUDP), tun("2001:db8::1", config.EncapUDP)}, nil, "wan0"},
		{"wildcard, raw ESP tunnel", "0.0.0.0:4500", []config.Tunnel{tun("198.51.100.1", config.EncapNone), tun("192.0.2.1", config.EncapUDP)}, nil, "wan0"},
		{"wildcard, connection", "0.0.0.0:4500", nil, []config.Connection{{Local: netip.MustParseAddr("198.51.100.1")}}, "wan1"},
		{"wildcard, nothing local", "0.0.0.0:4500", nil, []config.Connection{{}}, "no interface: udp.listen 0.0.0.0:4500 is a wildcard and no tunnel or connection names a local address"},
		{"two interfaces", "0.0.0.0:4500", []config.Tunnel{tun("192.0.2.1", config.EncapUDP)}, []config.Connection{{Local: netip.MustParseAddr("198.51.100.1")}}, "the local addresses are on 2 interfaces (wan0, wan1); AF_XDP serves one"},
		{"loopback", "127.0.0.1:4500", nil, nil, "lo, which holds 127.0.0.1, is a loopback interface"},
		{"not here", "203.0.113.9:4500", nil, nil, "no interface holds 203.0.113.9"},
	} {
		cfg := &config.Gateway{UDP: &config.UDP{Listen: netip.MustParseAddrPort(tc.listen)}, Tunnels: tc.tunnels, Connections: tc.conns}
		got, err := xdpInterface(cfg, lookupInterface)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) || (err == nil) != !strings.Contains(tc.want, " ") {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestESPLinkSocket: link = "socket" never tries AF_XDP and gives the
// data plane the UDP sockets as they are.
func TestESPLinkSocket(t *testing.T) {
	fakeInterfaces(t)
	withXDP(t, func(string, xdpRequest) ([]pktio.Link, error) {
		t.Error("link = \"socket\" tried AF_XDP")
		return nil, errors.New("no")
	}, "")
	g, logs := espTestGateway()
	socks, _ := testSockets(t, 2)
	net, err := g.openESPLinks(xdpTestConfig(t, "[udp]\nlisten = \"192.0.2.1:4500\"\nlink = \"socket\"\n"), socks)
	if err != nil {
		t.Fatal(err)
	}
	if len(net) != 2 || net[0] != socks[0] || net[1] != socks[1] {
		t.Errorf("links %v, want the sockets %v", net, socks)
	}
	info, ok := g.ESPLink()
	if !ok || info.Kind != "socket" || info.Config != "socket" || info.XDP != nil {
		t.Errorf("ESPLink %+v, %v", info, ok)
	}
	if out := logs.String(); !strings.Contains(out, `msg="ESP link: the UDP sockets" link=socket config=socket why="[udp] link = \"socket\""`) {
		t.Errorf("log:\n%s", out)
	}
}

// TestESPLinkAutoFallsBack: with link = "auto" (the default) a program
// that does not load, or an interface AF_XDP does not serve, leaves the
// gateway on its UDP sockets, with one log line that says why.
func TestESPLinkAutoFallsBack(t *testing.T) {
	fakeInterfaces(t)
	for _, tc := range []struct{ name, udp, why string }{
		{"program", "[udp]\nlisten = \"192.0.2.1:4500\"\n", "AF_XDP: program or sockets on wan0: xdp: load: operation not permitted"},
		{"loopback", "[udp]\nlisten = \"127.0.0.1:4500\"\nlink = \"auto\"\n", "AF_XDP: lo, which holds 127.0.0.1, is a loopback interface"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withXDP(t, func(ifname string, r xdpRequest) ([]pktio.Link, error) {
				return nil, errors.New("xdp: load: operation not permitted")
			}, "")
			g, logs := espTestGateway()
			socks, _ := testSockets(t, 2)
			net, err := g.openESPLinks(xdpTestConfig(t, tc.udp), socks)
			if err != nil {
				t.Fatal(err)
			}
			if len(net) != 2 || net[0] != socks[0] || net[1] != socks[1] {
				t.Errorf("links %v, want the sockets %v", net, socks)
			}
			info, _ := g.ESPLink()
			if info.Kind != "socket" || info.Config != "auto" || info.Why != tc.why {
				t.Errorf("ESPLink %+v, want socket because %q", info, tc.why)
			}
			out := logs.String()
			if strings.Count(out, "ESP link") != 1 || !strings.Contains(out, "link=socket config=auto why=\""+tc.why+"\"") {
				t.Errorf("log, want one line with why=%q:\n%s", tc.why, out)
			}
		})
	}
}

// TestESPLinkAutoSkipsCopyMode: auto leaves AF_XDP sockets that bound in
// copy mode (closed again) for the UDP sockets and says why; link = "xdp"
// takes them.
func TestESPLinkAutoSkipsCopyMode(t *testing.T) {
	fakeInterfaces(t)
	for _, tc := range []struct{ udp, kind string }{
		{"[udp]\nlisten = \"192.0.2.1:4500\"\n", "socket"},
		{"[udp]\nlisten = \"192.0.2.1:4500\"\nlink = \"xdp\"\n", "xdp"},
	} {
		var opened []pktio.Link
		withXDP(t, func(string, xdpRequest) ([]pktio.Link, error) {
			a, _ := pipe.New(4)
			t.Cleanup(func() { a.Close() })
			opened = []pktio.Link{a}
			return opened, nil
		}, "copy native")
		g, logs := espTestGateway()
		socks, _ := testSockets(t, 2)
		if _, err := g.openESPLinks(xdpTestConfig(t, tc.udp), socks); err != nil {
			t.Fatal(err)
		}
		info, _ := g.ESPLink()
		if info.Kind != tc.kind {
			t.Errorf("%q: ESPLink %+v, want %s", tc.udp, info, tc.kind)
		}
		_, err := opened[0].Write(nil)
		closed := errors.Is(err, pktio.ErrClosed)
		if tc.kind == "socket" {
			const why = "AF_XDP on wan0 binds in copy native mode only, which carries less TCP than the sockets (link = \"xdp\" takes it anyway)"
			if info.Why != why || !strings.Contains(logs.String(), "why=") {
				t.Errorf("why %q, want %q; log:\n%s", info.Why, why, logs.String())
			}
			if !closed {
				t.Errorf("the copy-mode AF_XDP link auto left is still open (Write: %v)", err)
			}
		} else if closed {
			t.Error("link = \"xdp\" closed its AF_XDP link")
		}
	}
}

// TestESPLinkAutoAsksZeroCopy: where the kernel says the driver offers no
// zero-copy sockets, auto attaches nothing and takes the sockets, saying
// why; where it says yes, auto opens AF_XDP; link = "xdp" does not ask.
func TestESPLinkAutoAsksZeroCopy(t *testing.T) {
	fakeInterfaces(t)
	for _, tc := range []struct {
		udp        string
		zc         bool
		kind       string
		wantOpened bool
	}{
		{"[udp]\nlisten = \"192.0.2.1:4500\"\n", false, "socket", false},
		{"[udp]\nlisten = \"192.0.2.1:4500\"\n", true, "xdp", true},
		{"[udp]\nlisten = \"192.0.2.1:4500\"\nlink = \"xdp\"\n", false, "xdp", true},
	} {
		opened, asked := false, ""
		withXDP(t, func(string, xdpRequest) ([]pktio.Link, error) {
			opened = true
			a, _ := pipe.New(4)
			t.Cleanup(func() { a.Close() })
			return []pktio.Link{a}, nil
		}, "zerocopy native")
		xdpZeroCopy = func(ifname string) (bool, error) { asked = ifname; return tc.zc, nil }
		g, _ := espTestGateway()
		socks, _ := testSockets(t, 2)
		if _, err := g.openESPLinks(xdpTestConfig(t, tc.udp), socks); err != nil {
			t.Fatal(err)
		}
		info, _ := g.ESPLink()
		if info.Kind != tc.kind || opened != tc.wantOpened {
			t.Errorf("%q, zero-copy %v: ESPLink %+v, opened %v; want %s, opened %v", tc.udp, tc.zc, info, opened, tc.kind, tc.wantOpened)
		}
		if tc.kind == "socket" {
			const why = `AF_XDP: the driver of wan0 offers no zero-copy sockets (the kernel's XDP features), and copy mode carries less TCP than the sockets (link = "xdp" takes it anyway)`
			if info.Why != why || asked != "wan0" {
				t.Errorf("why %q (asked about %q), want %q", info.Why, asked, why)
			}
		}
	}
}

// TestESPLinkXDPError: link = "xdp" where AF_XDP cannot be had is an
// error at start naming the file, line and field, and the reason.
func TestESPLinkXDPError(t *testing.T) {
	fakeInterfaces(t)
	withXDP(t, func(string, xdpRequest) ([]pktio.Link, error) {
		return nil, errors.New("xdp: attach: device or resource busy")
	}, "")
	for _, tc := range []struct{ udp, want string }{
		{"[udp]\nlisten = \"192.0.2.1:4500\"\nlink = \"xdp\"\n", `gw.toml:3:8: udp.link: link = "xdp", but program or sockets on wan0: xdp: attach: device or resource busy (link = "auto" would use the UDP sockets)`},
		{"[udp]\nlink = \"xdp\"\nlisten = \"127.0.0.1:4500\"\n", `gw.toml:2:8: udp.link: link = "xdp", but lo, which holds 127.0.0.1, is a loopback interface`},
	} {
		g, _ := espTestGateway()
		socks, _ := testSockets(t, 2)
		_, err := g.openESPLinks(xdpTestConfig(t, tc.udp), socks)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

// countingLink is a pipe end that counts the packets written to it, and
// says it handed 7 to its fallback.
type countingLink struct {
	pktio.Link
	wrote int
}

func (c *countingLink) Fallbacks() uint64 { return 7 }

func (c *countingLink) Write(bufs []*packet.Buf) (int, error) {
	c.wrote += len(bufs)
	return c.Link.Write(bufs)
}

// TestESPLinkXDP: where AF_XDP opens, the data plane gets its links and
// then the sockets, every one of which writes through an AF_XDP link and
// reads its socket; pktio/xdp is asked for [udp] listen with the sockets
// as fallbacks; ESPLink reports the link, its mode and both counters.
func TestESPLinkXDP(t *testing.T) {
	fakeInterfaces(t)
	var xdpNear, xdpFar []pktio.Link
	var req xdpRequest
	var gotIf string
	withXDP(t, func(ifname string, r xdpRequest) ([]pktio.Link, error) {
		gotIf, req = ifname, r
		for range 2 {
			a, b := pipe.New(16)
			t.Cleanup(func() { a.Close() })
			xdpNear, xdpFar = append(xdpNear, &countingLink{Link: a}), append(xdpFar, b)
		}
		return xdpNear, nil
	}, "zerocopy native")
	g, logs := espTestGateway()
	socks, sockFar := testSockets(t, 3)
	net, err := g.openESPLinks(xdpTestConfig(t, "[udp]\nlisten = \"0.0.0.0:4500\"\n"), socks)
	if err != nil {
		t.Fatal(err)
	}
	if gotIf != "wan0" || req.Local != netip.MustParseAddrPort("0.0.0.0:4500") || len(req.Fallback) < 3 {
		t.Fatalf("xdp.Open(%q, %+v)", gotIf, req)
	}
	if len(net) != 5 {
		t.Fatalf("%d links, want 2 AF_XDP and 3 sockets", len(net))
	}
	pool := packet.NewPool(16, 2048, 64)
	bufs := make([]*packet.Buf, 1)
	// Every entry writes through AF_XDP: entries 0 and 1 are the AF_XDP
	// links, the sockets 2, 3, 4 write to AF_XDP link 0, 1, 0.
	for i, l := range net {
		bufs[0] = pool.Get()
		bufs[0].Write(64, []byte{byte(i)})
		if n, err := l.Write(bufs); n != 1 || err != nil {
			t.Fatalf("link %d: write %d, %v", i, n, err)
		}
		bufs[0].Release()
	}
	if a, b := xdpNear[0].(*countingLink).wrote, xdpNear[1].(*countingLink).wrote; a != 3 || b != 2 {
		t.Errorf("AF_XDP links wrote %d and %d packets, want 3 and 2", a, b)
	}
	// The sockets' entries read the sockets.
	for j, far := range sockFar {
		bufs[0] = pool.Get()
		bufs[0].Write(64, []byte{0xa0 + byte(j)})
		far.Write(bufs)
		bufs[0].Release()
		bufs[0] = pool.Get()
		if n, err := net[2+j].Read(bufs); n != 1 || err != nil || bufs[0].Bytes()[0] != 0xa0+byte(j) {
			t.Errorf("socket %d: read %d, %v", j, n, err)
		}
		bufs[0].Release()
	}
	// A fallback writes to its socket.
	bufs[0] = pool.Get()
	bufs[0].Write(64, []byte{0xfb})
	if n, err := req.Fallback[1].Write(bufs); n != 1 || err != nil {
		t.Errorf("fallback: %d, %v", n, err)
	}
	info, ok := g.ESPLink()
	if !ok || info.Kind != "xdp" || info.Config != "auto" || info.Mode != "zerocopy native" || info.Interface != "wan0" || info.Queues != 2 {
		t.Errorf("ESPLink %+v", info)
	}
	if info.XDP == nil || info.XDP.TxPackets != 5 || info.Socket.RxPackets != 3 || info.Socket.TxPackets != 1 || info.Fallbacks != 14 {
		t.Errorf("ESPLink counters: xdp %+v, socket %+v, fallbacks %d", info.XDP, info.Socket, info.Fallbacks)
	}
	if out := logs.String(); !strings.Contains(out, `msg="ESP link: AF_XDP" link=xdp config=auto interface=wan0 mode="zerocopy native" queues=2 sockets=3`) {
		t.Errorf("log:\n%s", out)
	}
}

// TestXDPInterfaceHAAddress: a virtual address of an [[ha.group]] is not
// on any interface while the peer owns its group (a standby starting),
// but its dev names where it will go: AF_XDP goes there, so that a
// standby's auto takes AF_XDP as the owner's does and link = "xdp" starts.
func TestXDPInterfaceHAAddress(t *testing.T) {
	fakeInterfaces(t)
	vip := netip.MustParseAddr("203.0.113.9")
	ha := &config.HA{Groups: []config.HAGroup{{Name: "g", Addresses: []config.HAAddress{{Prefix: netip.PrefixFrom(vip, 24), Dev: "wan0"}}}}}
	for _, tc := range []struct {
		name    string
		listen  string
		tunnels []config.Tunnel
	}{
		{"listen on the virtual address", "203.0.113.9:4500", nil},
		{"wildcard, tunnel from the virtual address", "0.0.0.0:4500", []config.Tunnel{{Local: vip, Encap: config.EncapUDP}}},
	} {
		cfg := &config.Gateway{UDP: &config.UDP{Listen: netip.MustParseAddrPort(tc.listen)}, Tunnels: tc.tunnels, HA: ha}
		got, err := xdpInterface(cfg, lookupInterface)
		if err != nil || got != "wan0" {
			t.Errorf("%s: got %q, %v; want wan0", tc.name, got, err)
		}
	}
}
