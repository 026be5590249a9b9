package lab

// The topology of the high-availability tests (issue 18): two gateways
// that share virtual addresses on a wan and a lan segment, the routers and
// hosts around them, and a remote peer.
//
//	                    peer (remote sluice / strongSwan)       remote
//	                    wan0 198.51.100.1/24 lan0 10.2.1.1/24 == eth0 10.2.1.10/24
//	                      |
//	            wan router: nftables (table inet lab, table bridge lab)
//	            peer 198.51.100.254/24
//	            br0 192.0.2.254/24 [ports gwa, gwb]       synca 10.9.1.254/24   syncb 10.9.2.254/24
//	              |                    |                    |                     |
//	  gwa wan0 192.0.2.11/24   gwb wan0 192.0.2.12/24   gwa sync0 10.9.1.1/24  gwb sync0 10.9.2.1/24
//	  gwa lan0 10.1.0.11/24    gwb lan0 10.1.0.12/24
//	              |                    |
//	            lan router: br0 10.1.0.254/24 [ports gwa, gwb]
//	            host 10.1.1.1/24 ================================ host: eth0 10.1.1.10/24
//
// The virtual addresses are 192.0.2.10/24 on wan0 and 10.1.0.1/24 on lan0
// of whichever gateway owns them (HATopology.AddVIPs places them by hand
// for tests without the HA feature). Both gateways hang off a bridge in
// the router namespaces, so when an address moves the routers' neighbour
// caches still point at the old owner's MAC until a gratuitous ARP
// corrects them, as on a real segment.
//
// The sync link between the gateways is routed through the wan router on
// links of its own (10.9.1.0/24 and 10.9.2.0/24), not the lan bridge: the
// wan router's nftables can then cut it (CutSync: split brain) without
// touching the traffic, and the witness address (HATopology.Witness, on
// the wan router, where a listener accepts and closes connections: only a
// completed connect counts as reachable) stays reachable over the wan when
// the sync link is cut. Isolate cuts one gateway off everything (wan and sync) at the
// router's ports.
//
// Every router and gateway forwards IPv4. The gateways also have an
// unreachable route for 10.0.0.0/8, so that while a gateway's TUN device is
// gone (its daemon restarting) traffic for the remote network is refused
// rather than sent in the clear to the default route, and
// net.ipv4.ip_nonlocal_bind, so that a standby may bind the virtual address
// before it holds it. IPv4 only.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
)

// The addresses of an HATopology.
var (
	haWANVIP    = netip.MustParsePrefix("192.0.2.10/24")
	haLANVIP    = netip.MustParsePrefix("10.1.0.1/24")
	haRouterWAN = netip.MustParsePrefix("192.0.2.254/24")
	haRouterLAN = netip.MustParsePrefix("10.1.0.254/24")
	haRouterPG  = netip.MustParsePrefix("198.51.100.254/24")
	haPeerWAN   = netip.MustParsePrefix("198.51.100.1/24")
	haPeerLAN   = netip.MustParsePrefix("10.2.1.1/24")
	haRemote    = netip.MustParsePrefix("10.2.1.10/24")
	haHostGW    = netip.MustParsePrefix("10.1.1.1/24")
	haHost      = netip.MustParsePrefix("10.1.1.10/24")
	haLocalNet  = netip.MustParsePrefix("10.1.0.0/16")
	haRemoteNet = netip.MustParsePrefix("10.2.0.0/16")
	haSyncNet   = netip.MustParsePrefix("10.9.0.0/16")
	haWitness   = netip.MustParseAddrPort("192.0.2.254:53")
)

// Interface names in the HATopology's namespaces.
const (
	HAWANIf  = "wan0"  // a gateway's wan side; also the peer's
	HALANIf  = "lan0"  // a gateway's lan side; also the peer's side to the remote host
	HASyncIf = "sync0" // a gateway's sync link
	// HAPeerPort is the wan router's link to the peer: all ESP between
	// the gateways and the peer crosses it, once each way (CaptureWAN).
	HAPeerPort = "peer"
	haBridge   = "br0"
)

// HAGateway is one of the two gateway namespaces of an HATopology and its
// own (not virtual) addresses.
type HAGateway struct {
	// Name is "a" or "b"; the namespace's suffix is "gw" + Name.
	Name string
	NS   *Netns
	WAN  netip.Prefix // on HAWANIf: 192.0.2.11/24 (a), 192.0.2.12/24 (b)
	LAN  netip.Prefix // on HALANIf: 10.1.0.11/24, 10.1.0.12/24
	Sync netip.Prefix // on HASyncIf: 10.9.1.1/24, 10.9.2.1/24
	// Port is the name of this gateway's port on the routers' bridges
	// ("gwa"); the router's end of its sync link is "sync" + Name.
	Port string
}

// SyncAddr is the gateway's sync address with port: what its [ha] listen
// is and the other member's [ha] peer.
func (g *HAGateway) SyncAddr(port uint16) netip.AddrPort {
	return netip.AddrPortFrom(g.Sync.Addr(), port)
}

// HATopology is the network of the failover tests; see the drawing at the
// top of hatopo.go. Its fields are set by NewHATopology and not changed
// afterwards; its namespaces belong to the Lab.
type HATopology struct {
	Lab *Lab

	// WAN is the wan router, with nftables loaded (see CutSync,
	// Isolate, NFT and Counters).
	WAN *Netns
	// LAN is the lan router; Host is a host behind it.
	LAN, Host *Netns
	// A and B are the two gateways.
	A, B *HAGateway
	// Peer is the remote gateway's namespace (a sluice or strongSwan
	// runs there); Remote is a host behind it, on the peer's HALANIf.
	Peer, Remote *Netns

	// WANVIP (on HAWANIf) and LANVIP (on HALANIf) are the virtual
	// addresses the owning gateway holds.
	WANVIP, LANVIP netip.Prefix
	// RouterWAN is the wan router's address on the gateways' segment.
	RouterWAN netip.Addr
	// PeerWAN is the peer's address (on its HAWANIf), PeerLAN its
	// address toward Remote (on its HALANIf).
	PeerWAN, PeerLAN netip.Prefix
	// HostAddr and RemoteAddr are the hosts' addresses: traffic between
	// them goes through a gateway and the peer.
	HostAddr, RemoteAddr netip.Addr
	// LocalNet is everything on the gateways' lan side (the peer's
	// tunnel remote); RemoteNet everything behind the peer (the
	// gateways' tunnel remote). Each router routes its way into them.
	LocalNet, RemoteNet netip.Prefix
	// Witness is a TCP address on the wan router that accepts
	// connections (and closes them): a completed connect says the
	// router is reachable.
	Witness netip.AddrPort
}

// haNFT is the wan router's ruleset: everything is accepted and counted;
// the chains cut_* start empty and take the rules of CutSync and Isolate.
const haNFT = `
table inet lab {
	counter forwarded {}
	counter sync_forwarded {}
	chain cut_sync {
	}
	chain cut_a {
	}
	chain cut_b {
	}
	chain forward {
		type filter hook forward priority 0; policy accept;
		jump cut_sync
		jump cut_a
		jump cut_b
		iifname { "synca", "syncb" } oifname { "synca", "syncb" } counter name sync_forwarded
		counter name forwarded
	}
	chain input {
		type filter hook input priority 0; policy accept;
		jump cut_a
		jump cut_b
	}
	chain output {
		type filter hook output priority 0; policy accept;
		jump cut_a
		jump cut_b
	}
}
table bridge lab {
	chain cut_a {
	}
	chain cut_b {
	}
	chain forward {
		type filter hook forward priority 0; policy accept;
		jump cut_a
		jump cut_b
	}
	chain input {
		type filter hook input priority 0; policy accept;
		jump cut_a
		jump cut_b
	}
	chain output {
		type filter hook output priority 0; policy accept;
		jump cut_a
		jump cut_b
	}
}
`

// NewHATopology builds the HA test network in l: seven namespaces (wan
// router "wan", lan router "lan", "host", gateways "gwa" and "gwb", "peer"
// and "remote"), their links, addresses and routes, the wan router's
// nftables ruleset, and forwarding. Nothing runs in it yet and no gateway
// holds the virtual addresses. It needs root, iproute2, sysctl and nft.
func (l *Lab) NewHATopology(ctx context.Context) (*HATopology, error) {
	t := &HATopology{
		Lab: l, WANVIP: haWANVIP, LANVIP: haLANVIP, RouterWAN: haRouterWAN.Addr(),
		PeerWAN: haPeerWAN, PeerLAN: haPeerLAN, HostAddr: haHost.Addr(), RemoteAddr: haRemote.Addr(),
		LocalNet: haLocalNet, RemoteNet: haRemoteNet, Witness: haWitness,
		A: &HAGateway{Name: "a", Port: "gwa", WAN: netip.MustParsePrefix("192.0.2.11/24"),
			LAN: netip.MustParsePrefix("10.1.0.11/24"), Sync: netip.MustParsePrefix("10.9.1.1/24")},
		B: &HAGateway{Name: "b", Port: "gwb", WAN: netip.MustParsePrefix("192.0.2.12/24"),
			LAN: netip.MustParsePrefix("10.1.0.12/24"), Sync: netip.MustParsePrefix("10.9.2.1/24")},
	}
	var err error
	for _, n := range []struct {
		p      **Netns
		suffix string
	}{{&t.WAN, "wan"}, {&t.LAN, "lan"}, {&t.Host, "host"}, {&t.A.NS, "gwa"}, {&t.B.NS, "gwb"}, {&t.Peer, "peer"}, {&t.Remote, "remote"}} {
		if *n.p, err = l.NewNetns(ctx, n.suffix); err != nil {
			return nil, err
		}
	}
	if err := t.wire(); err != nil {
		return nil, err
	}
	for _, ns := range []*Netns{t.WAN, t.LAN, t.A.NS, t.B.NS, t.Peer} {
		if _, err := ns.Exec(ctx, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
			return nil, err
		}
	}
	for _, g := range []*HAGateway{t.A, t.B} {
		if _, err := g.NS.Exec(ctx, "sysctl", "-qw", "net.ipv4.ip_nonlocal_bind=1"); err != nil {
			return nil, err
		}
		if _, err := g.NS.Exec(ctx, "ip", "route", "add", "unreachable", "10.0.0.0/8"); err != nil {
			return nil, err
		}
	}
	if err := t.NFT(ctx, haNFT); err != nil {
		return nil, err
	}
	if err := t.serveWitness(); err != nil {
		return nil, err
	}
	l.log.Debug("HA topology built", "lab", l.id)
	return t, nil
}

// serveWitness listens on the witness address in the wan router and
// closes every connection it accepts, until the lab closes.
func (t *HATopology) serveWitness() error {
	ln, err := t.WAN.Listen("tcp", t.Witness.String())
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return t.Lab.Defer("close the witness", func() error {
		err := ln.Close()
		<-done
		return err
	})
}

// wire creates the links, addresses and routes.
func (t *HATopology) wire() error {
	l := t.Lab
	steps := []func() error{
		func() error { return t.WAN.addBridge(haBridge) },
		func() error { return t.WAN.AddAddr(haBridge, haRouterWAN) },
		func() error { return t.LAN.addBridge(haBridge) },
		func() error { return t.LAN.AddAddr(haBridge, haRouterLAN) },
		// The peer and the host behind it.
		func() error { return l.Veth(t.WAN, HAPeerPort, t.Peer, HAWANIf) },
		func() error { return t.WAN.AddAddr(HAPeerPort, haRouterPG) },
		func() error { return t.Peer.AddAddr(HAWANIf, haPeerWAN) },
		func() error { return t.Peer.AddRoute(netip.MustParsePrefix("0.0.0.0/0"), HAWANIf, haRouterPG.Addr()) },
		func() error { return l.Veth(t.Peer, HALANIf, t.Remote, "eth0") },
		func() error { return t.Peer.AddAddr(HALANIf, haPeerLAN) },
		func() error { return t.Remote.AddAddr("eth0", haRemote) },
		func() error { return t.Remote.AddRoute(netip.MustParsePrefix("0.0.0.0/0"), "eth0", haPeerLAN.Addr()) },
		// The host behind the lan router, which routes the remote network
		// to the lan's virtual address.
		func() error { return l.Veth(t.LAN, "host", t.Host, "eth0") },
		func() error { return t.LAN.AddAddr("host", haHostGW) },
		func() error { return t.Host.AddAddr("eth0", haHost) },
		func() error { return t.Host.AddRoute(netip.MustParsePrefix("0.0.0.0/0"), "eth0", haHostGW.Addr()) },
		func() error { return t.LAN.AddRoute(haRemoteNet, haBridge, haLANVIP.Addr()) },
	}
	for _, g := range []*HAGateway{t.A, t.B} {
		g := g
		steps = append(steps,
			func() error { return l.Veth(g.NS, HAWANIf, t.WAN, g.Port) },
			func() error { return t.WAN.setMaster(g.Port, haBridge) },
			func() error { return g.NS.AddAddr(HAWANIf, g.WAN) },
			func() error { return g.NS.AddRoute(netip.MustParsePrefix("0.0.0.0/0"), HAWANIf, haRouterWAN.Addr()) },
			func() error { return l.Veth(g.NS, HALANIf, t.LAN, g.Port) },
			func() error { return t.LAN.setMaster(g.Port, haBridge) },
			func() error { return g.NS.AddAddr(HALANIf, g.LAN) },
			func() error { return g.NS.AddRoute(haHost.Masked(), HALANIf, haRouterLAN.Addr()) },
			func() error { return l.Veth(g.NS, HASyncIf, t.WAN, "sync"+g.Name) },
			func() error { return t.WAN.AddAddr("sync"+g.Name, syncRouter(g)) },
			func() error { return g.NS.AddAddr(HASyncIf, g.Sync) },
			func() error { return g.NS.AddRoute(haSyncNet, HASyncIf, syncRouter(g).Addr()) },
		)
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// syncRouter is the wan router's address on g's sync link: .254 of g's
// sync /24.
func syncRouter(g *HAGateway) netip.Prefix {
	a := g.Sync.Masked().Addr().As4()
	a[3] = 254
	return netip.PrefixFrom(netip.AddrFrom4(a), g.Sync.Bits())
}

// addBridge creates a bridge (no STP, forwarding at once) and brings it up.
func (n *Netns) addBridge(name string) error {
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}, MulticastSnooping: new(bool)}
	if err := n.nl.LinkAdd(br); err != nil {
		return fmt.Errorf("lab: bridge %s in %s: %w", name, n.name, err)
	}
	return n.LinkUp(name)
}

// setMaster makes the interface a port of the bridge.
func (n *Netns) setMaster(port, bridge string) error {
	p, err := n.link(port)
	if err != nil {
		return err
	}
	br, err := n.link(bridge)
	if err != nil {
		return err
	}
	if err := n.nl.LinkSetMaster(p, br); err != nil {
		return fmt.Errorf("lab: %s into bridge %s in %s: %w", port, bridge, n.name, err)
	}
	return nil
}

// DelAddr removes the address from the interface; one that is not there
// is not an error.
func (n *Netns) DelAddr(ifname string, p netip.Prefix) error {
	lk, err := n.link(ifname)
	if err != nil {
		return err
	}
	if err := n.nl.AddrDel(lk, &netlink.Addr{IPNet: ipNet(p)}); err != nil && !strings.Contains(err.Error(), "cannot assign requested address") {
		return fmt.Errorf("lab: remove %s from %s in %s: %w", p, ifname, n.name, err)
	}
	return nil
}

// AddVIPs gives g the virtual addresses (WANVIP on HAWANIf, LANVIP on
// HALANIf) by hand, for tests without the HA feature, and announces them
// with a gratuitous ARP from each if iputils arping is installed (it is
// not on these machines: then the routers' neighbour caches follow only
// once their entries go stale; the HA feature announces by itself).
func (t *HATopology) AddVIPs(ctx context.Context, g *HAGateway) error {
	for _, v := range []struct {
		ifname string
		p      netip.Prefix
	}{{HAWANIf, t.WANVIP}, {HALANIf, t.LANVIP}} {
		if err := g.NS.AddAddr(v.ifname, v.p); err != nil {
			return err
		}
		// A neighbour that had the other gateway's MAC learns the new
		// one; without arping (not installed here) it learns it when
		// its entry goes stale.
		if _, err := exec.LookPath("arping"); err == nil {
			g.NS.Exec(ctx, "arping", "-q", "-U", "-c", "1", "-I", v.ifname, v.p.Addr().String())
		}
	}
	return nil
}

// RemoveVIPs takes the virtual addresses from g.
func (t *HATopology) RemoveVIPs(g *HAGateway) error {
	if err := g.NS.DelAddr(HAWANIf, t.WANVIP); err != nil {
		return err
	}
	return g.NS.DelAddr(HALANIf, t.LANVIP)
}

// CaptureWAN captures every ESP packet between the gateways and the peer,
// on the wan router's link to the peer (CaptureESP), into file.
func (t *HATopology) CaptureWAN(file string) (*ESPCapture, error) {
	return CaptureESP(t.WAN, HAPeerPort, file)
}

// Replay sends captured ESP packets again from the wan router, each to
// its destination (ReplayESP): packets of the peer reach the gateway that
// holds WANVIP, packets of a gateway reach the peer.
func (t *HATopology) Replay(pkts []ESPPacket) (int, error) {
	return ReplayESP(t.WAN, pkts)
}

// LinkMAC returns the interface's hardware address.
func (n *Netns) LinkMAC(ifname string) (net.HardwareAddr, error) {
	lk, err := n.link(ifname)
	if err != nil {
		return nil, err
	}
	return lk.Attrs().HardwareAddr, nil
}

// Neighbour returns the hardware address the namespace's neighbour table
// (ARP, NDP) holds for addr, and the entry's state (netlink.NUD_*); nil
// and 0 when it has no entry.
func (n *Netns) Neighbour(addr netip.Addr) (net.HardwareAddr, int, error) {
	fam := netlink.FAMILY_V4
	if addr.Is6() {
		fam = netlink.FAMILY_V6
	}
	ns, err := n.nl.NeighList(0, fam)
	if err != nil {
		return nil, 0, fmt.Errorf("lab: neighbours in %s: %w", n.name, err)
	}
	for _, e := range ns {
		if a, ok := netip.AddrFromSlice(e.IP); ok && a.Unmap() == addr {
			return e.HardwareAddr, e.State, nil
		}
	}
	return nil, 0, nil
}

// HasAddr reports whether the interface has the address.
func (n *Netns) HasAddr(ifname string, a netip.Addr) (bool, error) {
	lk, err := n.link(ifname)
	if err != nil {
		return false, err
	}
	as, err := n.nl.AddrList(lk, netlink.FAMILY_ALL)
	if err != nil {
		return false, fmt.Errorf("lab: addresses of %s in %s: %w", ifname, n.name, err)
	}
	for _, x := range as {
		if b, ok := netip.AddrFromSlice(x.IP); ok && b.Unmap() == a {
			return true, nil
		}
	}
	return false, nil
}

// VIPHolders returns the gateways that hold the wan virtual address
// (WANVIP on HAWANIf): one normally, none between an owner's death and a
// takeover, two under split brain.
func (t *HATopology) VIPHolders() ([]*HAGateway, error) {
	var hs []*HAGateway
	for _, g := range []*HAGateway{t.A, t.B} {
		ok, err := g.NS.HasAddr(HAWANIf, t.WANVIP.Addr())
		if err != nil {
			return nil, err
		}
		if ok {
			hs = append(hs, g)
		}
	}
	return hs, nil
}

// WaitVIP waits until g, and only g, holds the wan virtual address (g
// nil: no gateway holds it), polling every millisecond.
func (t *HATopology) WaitVIP(ctx context.Context, g *HAGateway, timeout time.Duration) error {
	what := "no gateway to hold " + t.WANVIP.Addr().String()
	if g != nil {
		what = "gateway " + g.Name + " alone to hold " + t.WANVIP.Addr().String()
	}
	return WaitFor(ctx, what, timeout, time.Millisecond, func() (bool, error) {
		hs, err := t.VIPHolders()
		if err != nil {
			return false, err
		}
		var names []string
		for _, h := range hs {
			names = append(names, h.Name)
		}
		return (g == nil && len(hs) == 0) || (len(hs) == 1 && hs[0] == g), fmt.Errorf("held by %v", names)
	})
}

// NFT loads an nftables script (nft -f) in the wan router.
func (t *HATopology) NFT(ctx context.Context, script string) error {
	cmd := t.WAN.Command(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return cmdError(t.WAN.name+": nft -f", out, err)
	}
	return nil
}

// CutSync drops everything the wan router would forward between the
// gateways' sync links, silently (no ICMP, no reset): split brain. The
// traffic, and each gateway's way to the witness, are untouched. The rule
// counts what it drops (Counters: "cut_sync").
func (t *HATopology) CutSync(ctx context.Context) error {
	return t.NFT(ctx, `add rule inet lab cut_sync iifname { "synca", "syncb" } oifname { "synca", "syncb" } counter drop comment "cut_sync"`)
}

// HealSync removes what CutSync added.
func (t *HATopology) HealSync(ctx context.Context) error {
	return t.NFT(ctx, "flush chain inet lab cut_sync")
}

// Isolate cuts g off, silently: the wan router drops every frame and
// packet from and to g's ports (its wan port on the bridge and its sync
// link), so g hears neither the other gateway, nor the witness, nor the
// peer. The rules count what they drop (Counters: "cut_a", "cut_b").
func (t *HATopology) Isolate(ctx context.Context, g *HAGateway) error {
	c, s := "cut_"+g.Name, "sync"+g.Name
	return t.NFT(ctx, fmt.Sprintf(`
add rule bridge lab %[1]s iifname %[2]q counter drop comment "%[1]s"
add rule bridge lab %[1]s oifname %[2]q counter drop comment "%[1]s"
add rule inet lab %[1]s iifname %[3]q counter drop comment "%[1]s"
add rule inet lab %[1]s oifname %[3]q counter drop comment "%[1]s"
`, c, g.Port, s))
}

// Rejoin removes what Isolate added for g.
func (t *HATopology) Rejoin(ctx context.Context, g *HAGateway) error {
	c := "cut_" + g.Name
	return t.NFT(ctx, fmt.Sprintf("flush chain bridge lab %[1]s\nflush chain inet lab %[1]s\n", c))
}

// Counters reads the wan router's nftables counters: the named counters
// ("forwarded", "sync_forwarded": packets) and the packets dropped by the
// rules of CutSync and Isolate, summed by their comment ("cut_sync",
// "cut_a", "cut_b"), 0 when there is no such rule.
func (t *HATopology) Counters(ctx context.Context) (map[string]uint64, error) {
	out, err := t.WAN.Exec(ctx, "nft", "list", "ruleset")
	if err != nil {
		return nil, err
	}
	m := map[string]uint64{"cut_sync": 0, "cut_a": 0, "cut_b": 0}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	var counter string // the named counter whose block we are in
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[0] == "counter" && f[2] == "{":
			counter = f[1]
		case counter != "" && len(f) >= 2 && f[0] == "packets":
			n, _ := strconv.ParseUint(f[1], 10, 64)
			m[counter] += n
			counter = ""
		default:
			for i := 0; i+1 < len(f); i++ {
				if f[i] != "packets" {
					continue
				}
				n, _ := strconv.ParseUint(f[i+1], 10, 64)
				for j := i; j+1 < len(f); j++ {
					if f[j] == "comment" {
						m[strings.Trim(f[j+1], `"`)] += n
					}
				}
				break
			}
		}
	}
	return m, nil
}
