package e2e_test

// [udp] link: the ESP side over AF_XDP (pktio/xdp) between two gateways
// in namespaces, and what auto and xdp do where AF_XDP cannot be had.

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/internal/lab"
)

// startPairLink is startPair with [udp] link = link on both gateways.
func startPairLink(t *testing.T, wan [2]netip.Prefix, cfgs [2]*gwConfig, link string) *testbed {
	t.Helper()
	for _, c := range cfgs {
		c.Link = link
	}
	return startPair(t, wan, cfgs)
}

// espLink is the site's ESPLink, failing the test without one.
func (s *site) espLink() gateway.ESPLinkInfo {
	s.tb.t.Helper()
	st := s.stats()
	if st.ESPLink == nil {
		s.tb.t.Fatalf("gateway %s: stats without esp_link", s.name)
	}
	return *st.ESPLink
}

// TestXDPLink runs two gateways with [udp] link = "xdp" on the veth
// between their namespaces (outer IPv4 and IPv6) and sends pings (inner
// IPv4 and IPv6, both ways) and iperf3 TCP and UDP through the tunnel.
// The gateways' counters show that AF_XDP carried the ESP: its sockets
// received and sent at least what the traffic needed, the UDP sockets
// (open beside them for IKE and keepalives) next to none, and nothing
// sealed on one side failed to open on the other.
func TestXDPLink(t *testing.T) {
	for _, fam := range []string{"ipv4", "ipv6"} {
		t.Run("outer="+fam, func(t *testing.T) {
			requireTool(t, "ping", "iperf3", "ss")
			wan := wan4
			if fam == "ipv6" {
				wan = wan6
			}
			tb := startPairLink(t, wan, pairConfigs(t, pairOptions{wan: wan}), "xdp")
			a, b := tb.sites[0], tb.sites[1]
			for _, s := range tb.sites {
				l := s.espLink()
				t.Logf("gateway %s: ESP link %+v", s.name, l)
				if l.Kind != "xdp" || l.Config != "xdp" || l.Interface != wanIf || l.Queues < 1 || l.Mode == "" {
					t.Fatalf("gateway %s: ESP link %+v, want AF_XDP on %s", s.name, l, wanIf)
				}
			}
			ctx := tb.ctx
			waitPing(t, ctx, a.ns, inner4[1].Addr())
			waitPing(t, ctx, a.ns, inner6[1].Addr())
			var before [2]gateway.ESPLinkInfo
			for i, s := range tb.sites {
				before[i] = s.espLink()
			}
			const pings = 200
			for _, p := range []struct {
				what string
				ns   *lab.Netns
				dst  netip.Addr
			}{{"A->B IPv4", a.ns, inner4[1].Addr()}, {"A->B IPv6", a.ns, inner6[1].Addr()}, {"B->A IPv4", b.ns, inner4[0].Addr()}} {
				if r := mustPing(t, ctx, p.what, p.ns, p.dst, pings, 5*time.Millisecond); r.Received != r.Sent {
					t.Errorf("%s: %d of %d pings answered", p.what, r.Received, r.Sent)
				}
			}
			mustIperf(t, tb, "xdp A->B", b.ns, inner4[1].Addr(), a.ns, iperfOptions{Seconds: 2})
			mustIperf(t, tb, "xdp B->A", b.ns, inner4[1].Addr(), a.ns, iperfOptions{Seconds: 2, Reverse: true})
			mustIperf(t, tb, "xdp A->B UDP", b.ns, inner4[1].Addr(), a.ns, iperfOptions{Seconds: 2, UDP: true, Rate: "50M", Len: 1200})

			for i, s := range tb.sites {
				l := s.espLink()
				x, u := l.XDP, l.Socket
				if x == nil {
					t.Fatalf("gateway %s: no AF_XDP counters: %+v", s.name, l)
				}
				rx, tx := x.RxPackets-before[i].XDP.RxPackets, x.TxPackets-before[i].XDP.TxPackets
				srx, stx := u.RxPackets-before[i].Socket.RxPackets, u.TxPackets-before[i].Socket.TxPackets
				t.Logf("gateway %s: AF_XDP rx %d tx %d, UDP sockets rx %d tx %d (since the first ping)", s.name, rx, tx, srx, stx)
				// 3 x 200 pings cross each gateway once each way: each
				// received and sent 600 ESP packets for them alone.
				if rx < 3*pings || tx < 3*pings {
					t.Errorf("gateway %s: AF_XDP received %d and sent %d ESP packets, want at least %d each", s.name, rx, tx, 3*pings)
				}
				// The sockets take what AF_XDP could not send (a next hop
				// not yet resolved) and what it passes on (IKE,
				// keepalives): next to none here.
				if srx > rx/100 || stx > tx/100 {
					t.Errorf("gateway %s: the UDP sockets received %d and sent %d packets beside AF_XDP's %d and %d: the ESP did not go through AF_XDP", s.name, srx, stx, rx, tx)
				}
				if x.RxDrops != 0 || x.TxDrops != 0 {
					t.Errorf("gateway %s: AF_XDP dropped rx %d tx %d", s.name, x.RxDrops, x.TxDrops)
				}
				d := drops(s.stats())
				for _, bad := range []string{"sa:auth_failed", "sa:replay", "auth_failed", "replay", "unknown_spi", "malformed"} {
					if d[bad] > 0 {
						t.Errorf("gateway %s: %d drops for %s (all drops: %v)", s.name, d[bad], bad, d)
					}
				}
			}
			// sluice stats names the link.
			out, err := a.cli("stats")
			if err != nil || !strings.Contains(out, "ESP link: xdp (") {
				t.Errorf("sluice stats: %v\n%s", err, out)
			}
		})
	}
}

// TestXDPAutoOnVeth: with the default link (auto) on a veth, whose
// driver offers AF_XDP in copy mode only, both gateways carry ESP on the
// UDP sockets, say why, and leave no XDP program on the interface; the
// tunnel works.
func TestXDPAutoOnVeth(t *testing.T) {
	requireTool(t, "ping")
	tb := startPair(t, wan4, pairConfigs(t, pairOptions{wan: wan4}))
	for _, s := range tb.sites {
		l := s.espLink()
		t.Logf("gateway %s: %s: %s", s.name, l.Kind, l.Why)
		// Linux 6.3 and later say so before anything is attached; an
		// older kernel's auto attaches, sees copy mode and detaches.
		if l.Kind != "socket" || l.Config != "auto" ||
			!(strings.Contains(l.Why, "the driver of "+wanIf+" offers no zero-copy sockets") || strings.Contains(l.Why, "binds in copy")) {
			t.Errorf("gateway %s: ESP link %+v, want the UDP sockets because %s has no zero-copy AF_XDP", s.name, l, wanIf)
		}
		if err := s.ns.Do(func() error {
			lk, err := netlink.LinkByName(wanIf)
			if err != nil {
				return err
			}
			if x := lk.Attrs().Xdp; x != nil && x.Attached {
				t.Errorf("gateway %s: an XDP program (id %d) is attached to %s under link = \"auto\"", s.name, x.ProgId, wanIf)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitPing(t, tb.ctx, tb.sites[0].ns, inner4[1].Addr())
}

// TestXDPLinkUnavailable: where AF_XDP cannot be had (the gateway's
// address is on the loopback), link = "xdp" fails at start with the
// file, line and field and the reason, and link = "auto" starts on the
// UDP sockets and says why in one log line and in its stats.
func TestXDPLinkUnavailable(t *testing.T) {
	lab.Require(t)
	l := lab.NewForTest(t, nil)
	ctx := testContext(t, defaultSetup)
	ns, err := l.NewNetns(ctx, "lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.LinkUp("lo"); err != nil {
		t.Fatal(err)
	}
	dir, err := l.Dir()
	if err != nil {
		t.Fatal(err)
	}
	local, peer := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	cfgs := pairConfigs(t, pairOptions{wan: [2]netip.Prefix{netip.PrefixFrom(local, 8), netip.PrefixFrom(peer, 8)}})
	cfg := cfgs[0]
	cfg.StateDir = filepath.Join(dir, "state")
	file := filepath.Join(dir, "gateway.toml")
	sock := filepath.Join(dir, "gateway.sock")
	write := func(link string) {
		cfg.Link = link
		if err := os.WriteFile(file, []byte(cfg.render()), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	write("xdp")
	runCtx, cancel := context.WithTimeout(ctx, upWait)
	defer cancel()
	outb, err := ns.Command(runCtx, sluiceBin, "run", "-c", file, "--socket", sock).CombinedOutput()
	if out := string(outb); err == nil || runCtx.Err() != nil ||
		!strings.Contains(out, file+":") || !strings.Contains(out, `udp.link: link = "xdp", but lo, which holds 127.0.0.1, is a loopback interface`) {
		t.Errorf("link = \"xdp\" on the loopback: %v (%v), want an error naming the file, udp.link and the reason:\n%s", err, runCtx.Err(), out)
	}

	write("auto")
	p, err := l.Start(ns, "gateway link=auto", []string{sluiceBin, "run", "-c", file, "--socket", sock}, &lab.ProcOptions{StopTimeout: stopWait})
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitControl(ctx, sock, upWait, p); err != nil {
		t.Fatal(err)
	}
	st, err := lab.ControlStats(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.ESPLink == nil || st.ESPLink.Kind != "socket" || st.ESPLink.Config != "auto" || !strings.Contains(st.ESPLink.Why, "loopback") {
		t.Errorf("link = \"auto\" on the loopback: ESP link %+v, want the UDP sockets because of the loopback", st.ESPLink)
	}
	err = lab.WaitFor(ctx, "the ESP link's log line", upWait, 0, func() (bool, error) {
		out := p.Output()
		return strings.Count(out, "ESP link") == 1 && strings.Contains(out, "link=socket config=auto"), nil
	})
	if err != nil {
		t.Errorf("%v:\n%s", err, p.Output())
	}
}

// TestXDPStrongSwan: with [udp] link = "xdp", the gateway opposite
// strongSwan 5.9.8 (kernel-libipsec, ESP in UDP) takes AF_XDP on its veth
// (auto would not: copy mode); IKE still reaches its UDP socket (the XDP program
// passes it to the kernel), the Child SA comes up, and ping and iperf3
// both ways go through AF_XDP.
func TestXDPStrongSwan(t *testing.T) {
	requireCharon(t)
	b := newSSBed(t, ssOptions{esp: "aes128gcm16", auth: "psk", link: "xdp"})
	before := b.gw.espLink()
	if before.Kind != "xdp" || before.Config != "xdp" {
		t.Fatalf("ESP link %+v: want AF_XDP on the veth", before)
	}
	ch := b.establish()
	b.traffic("over AF_XDP", true)
	b.checkCharonSPIs(ch)
	l := b.gw.espLink()
	rx, tx := l.XDP.RxPackets-before.XDP.RxPackets, l.XDP.TxPackets-before.XDP.TxPackets
	srx := l.Socket.RxPackets - before.Socket.RxPackets
	t.Logf("AF_XDP rx %d tx %d, UDP sockets rx %d tx %d", rx, tx, srx, l.Socket.TxPackets-before.Socket.TxPackets)
	// 20 pings each way, and iperf3 both ways: far more than 40 each.
	if rx < 40 || tx < 40 || srx > rx/100 {
		t.Errorf("AF_XDP received %d and sent %d ESP packets, the UDP sockets received %d: want the ESP on AF_XDP", rx, tx, srx)
	}
}
