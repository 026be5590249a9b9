package gateway

// xdp.go chooses the link that carries ESP in UDP ([udp] link):
//
//	socket  the UDP sockets of udp.OpenN (recvmmsg/sendmmsg), one per worker
//	xdp     AF_XDP sockets (pktio/xdp) on the interface that carries the
//	        gateway's ESP, one per receive queue, or no start
//	auto    xdp where its program loads and its sockets bind zero-copy,
//	        the UDP sockets otherwise (copy mode, as on veth, costs TCP
//	        more than it saves), with one log line that says which and why;
//	        a driver the kernel says offers no zero-copy is left alone
//
// The UDP sockets are open with every link. Under AF_XDP they still
// receive IKE on the NAT-T port, NAT-keepalives and any ESP that arrives
// on another interface (the XDP program passes all of that to the
// kernel), and they send what an AF_XDP socket cannot: a packet whose
// next hop has no resolved neighbour yet (the kernel resolves it).
//
// The data plane gets every link as an ESP link (dataplane.Config.Net):
// the AF_XDP links first, then the sockets. Each has a lane that reads it;
// a TUN lane sends on Net[i], so every socket's Write is pointed at an
// AF_XDP link (sendVia) and all ESP leaves through AF_XDP, whichever
// entry a TUN lane got.

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/xdp"
)

// xdpRequest is what the gateway asks of pktio/xdp for one interface.
type xdpRequest struct {
	// Local is [udp] listen: the address (unspecified: all of the
	// interface's) and port whose ESP the program steers.
	Local netip.AddrPort
	// Fallback[i] takes what AF_XDP socket i cannot send.
	Fallback []pktio.Link
	Log      *slog.Logger
}

// xdpOpen attaches the XDP program to ifname and opens its AF_XDP
// sockets, one per receive queue in use; xdpMode describes an open one
// ("copy native"). They are pktio/xdp's Open and Mode, variables so that
// tests can put a link that fails, or one in memory, in their place.
// Open runs in the gateway's network namespace (Start's).
var (
	xdpOpen = func(ifname string, r xdpRequest) ([]pktio.Link, error) {
		return xdp.Open(ifname, xdp.Options{Local: r.Local, Fallback: r.Fallback, Log: r.Log})
	}
	xdpMode = xdp.Mode
	// xdpZeroCopy says whether an interface's driver offers zero-copy
	// AF_XDP sockets, before anything is attached (pktio/xdp.ZeroCopy).
	xdpZeroCopy = xdp.ZeroCopy
)

// ESPLinkInfo says which link carries ESP in UDP, and its counters.
type ESPLinkInfo struct {
	// Config is [udp] link: "auto", "xdp" or "socket".
	Config string `json:"config"`
	// Kind is the link chosen: "xdp" or "socket".
	Kind string `json:"kind"`
	// Mode is the AF_XDP mode with Kind "xdp" (pktio/xdp.Mode: "copy
	// native", "zerocopy native", "copy generic").
	Mode string `json:"mode,omitempty"`
	// Interface is where the XDP program is attached, and Queues how
	// many AF_XDP sockets it has (one per receive queue).
	Interface string `json:"interface,omitempty"`
	Queues    int    `json:"queues,omitempty"`
	// Why says why auto took the sockets.
	Why string `json:"why,omitempty"`
	// XDP sums the AF_XDP sockets' counters, Socket the UDP sockets'.
	XDP    *LinkCounters `json:"xdp,omitempty"`
	Socket LinkCounters  `json:"socket"`
	// Fallbacks are the packets the AF_XDP sockets handed to the UDP
	// sockets to send (a next hop not yet resolved).
	Fallbacks uint64 `json:"fallbacks,omitempty"`
}

// fallbackCounter is an AF_XDP link that counts what it handed to its
// fallback (pktio/xdp's Link).
type fallbackCounter interface{ Fallbacks() uint64 }

// LinkCounters are the packets and bytes a set of links moved, and what
// they did not: RxDrops counts what was received and not delivered as a
// packet (IKE and NAT-keepalives on a UDP socket included), TxDrops the
// packets not sent.
type LinkCounters struct {
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxDrops   uint64 `json:"rx_drops"`
	TxDrops   uint64 `json:"tx_drops"`
}

func sumCounters(ls []pktio.Link) LinkCounters {
	var s LinkCounters
	for _, l := range ls {
		c := l.Stats().Snapshot()
		s.RxPackets += c.RxPackets
		s.RxBytes += c.RxBytes
		s.TxPackets += c.TxPackets
		s.TxBytes += c.TxBytes
		s.RxDrops += c.RxDrops()
		s.TxDrops += c.TxDrops()
	}
	return s
}

// espLinks is the gateway's ESP-in-UDP links; fixed for the process.
type espLinks struct {
	info   ESPLinkInfo // without counters
	socks  []pktio.Link
	xdp    []pktio.Link
	active bool // set: [udp] is configured
}

// ESPLink returns which link carries ESP in UDP, with its counters; false
// without [udp].
func (g *Gateway) ESPLink() (ESPLinkInfo, bool) {
	e := &g.esp
	if !e.active {
		return ESPLinkInfo{}, false
	}
	info := e.info
	info.Socket = sumCounters(e.socks)
	if len(e.xdp) > 0 {
		c := sumCounters(e.xdp)
		info.XDP = &c
	}
	for _, x := range e.xdp {
		if f, ok := x.(fallbackCounter); ok {
			info.Fallbacks += f.Fallbacks()
		}
	}
	return info, true
}

// openESPLinks chooses the ESP link by cfg's [udp] link over socks, the
// open UDP sockets, logs the choice in one line and returns the links the
// data plane reads and writes (see the top of this file). The AF_XDP
// links it opened are in g.esp.xdp; the caller closes them on error.
func (g *Gateway) openESPLinks(cfg *config.Gateway, socks []pktio.Link) ([]dataplane.Link, error) {
	asked := cfg.UDP.Link
	if asked == "" {
		asked = config.LinkAuto
	}
	g.esp = espLinks{active: true, socks: socks, info: ESPLinkInfo{Config: asked, Kind: config.LinkSocket}}
	plain := func(why string) []dataplane.Link {
		g.esp.info.Why = why
		g.log.Info("ESP link: the UDP sockets", "link", config.LinkSocket, "config", asked, "why", why, "sockets", len(socks))
		out := make([]dataplane.Link, len(socks))
		for i, s := range socks {
			out[i] = s
		}
		return out
	}
	if asked == config.LinkSocket {
		return plain("[udp] link = \"socket\""), nil
	}
	ifname, xls, err := g.tryXDP(cfg, socks, asked == config.LinkAuto)
	if err != nil {
		if asked == config.LinkXDP {
			return nil, fmt.Errorf("%s: udp.link: link = \"xdp\", but %w (link = \"auto\" would use the UDP sockets)", cfg.FieldPos("udp.link"), err)
		}
		return plain("AF_XDP: " + err.Error()), nil
	}
	mode := xdpMode(xls[0])
	if asked == config.LinkAuto && !strings.HasPrefix(mode, "zerocopy") {
		// Copy mode copies every frame and gives up the sockets' GSO and
		// GRO: on veth it carried 0.63x the sockets' TCP (1.7x their
		// 64-byte packet rate) in `sluice bench tunnel` (BENCHMARKS.md r).
		// auto takes AF_XDP only where the driver binds zero-copy.
		for _, x := range xls {
			x.Close()
		}
		return plain(fmt.Sprintf("AF_XDP on %s binds in %s mode only, which carries less TCP than the sockets "+
			"(link = \"xdp\" takes it anyway)", ifname, mode)), nil
	}
	g.esp.xdp = xls
	g.esp.info = ESPLinkInfo{Config: asked, Kind: config.LinkXDP, Mode: mode, Interface: ifname, Queues: len(xls)}
	g.log.Info("ESP link: AF_XDP", "link", config.LinkXDP, "config", asked, "interface", ifname, "mode", mode,
		"queues", len(xls), "sockets", len(socks))
	return espNet(xls, socks), nil
}

// tryXDP opens AF_XDP on the interface xdpInterface names, each socket
// falling back to a UDP socket. It returns the interface and the links,
// or why it could not. With zcOnly (auto) it first asks the kernel
// whether the driver offers zero-copy sockets and attaches nothing where
// it says no: on many drivers attaching a program resets the device's
// rings, which auto would do at every start only to detach again. A
// kernel that does not say (before Linux 6.3) is tried, and Open's mode
// decides.
func (g *Gateway) tryXDP(cfg *config.Gateway, socks []pktio.Link, zcOnly bool) (string, []pktio.Link, error) {
	ifname, err := xdpInterface(cfg, lookupInterface)
	if err != nil {
		return "", nil, err
	}
	if zcOnly {
		zc, err := xdpZeroCopy(ifname)
		switch {
		case err == nil && !zc:
			return "", nil, fmt.Errorf("the driver of %s offers no zero-copy sockets (the kernel's XDP features), "+
				"and copy mode carries less TCP than the sockets (link = \"xdp\" takes it anyway)", ifname)
		case err != nil:
			g.log.Debug("ESP link: the kernel does not say whether AF_XDP binds zero-copy; trying", "interface", ifname, "err", err)
		}
	}
	// A UDP socket may back several AF_XDP sockets, whose Writes do not
	// share a lock: the fallbacks serialise their own.
	fb := make([]*serialLink, len(socks))
	for i, s := range socks {
		fb[i] = &serialLink{Link: s}
	}
	req := xdpRequest{Local: cfg.UDP.Listen, Log: g.Logger("dataplane")}
	// pktio/xdp takes Fallback[i] for queue i (Open's queues are fewer
	// than maxXDPQueues): round robin over the sockets.
	for i := range maxXDPQueues {
		req.Fallback = append(req.Fallback, fb[i%len(fb)])
	}
	xls, err := xdpOpen(ifname, req)
	if err != nil {
		return "", nil, fmt.Errorf("program or sockets on %s: %w", ifname, err)
	}
	if len(xls) == 0 {
		return "", nil, fmt.Errorf("no AF_XDP socket on %s", ifname)
	}
	return ifname, xls, nil
}

// maxXDPQueues bounds the fallbacks handed to pktio/xdp (one per receive
// queue it may open).
const maxXDPQueues = 64

// espNet is the data plane's ESP links under AF_XDP: the AF_XDP links,
// then each UDP socket with its Write sent to an AF_XDP link. Each AF_XDP
// link is written through two of the data plane's per-link locks (its
// own entry's and a socket's), so it gets one lock of its own.
func espNet(xls, socks []pktio.Link) []dataplane.Link {
	out := make([]dataplane.Link, 0, len(xls)+len(socks))
	tx := make([]*serialLink, len(xls))
	for i, x := range xls {
		tx[i] = &serialLink{Link: x}
		out = append(out, tx[i])
	}
	for j, s := range socks {
		out = append(out, &sendVia{Link: s, tx: tx[j%len(tx)]})
	}
	return out
}

// serialLink is a Link whose Write is serialised by its own lock, for a
// Link written from goroutines that share no other lock.
type serialLink struct {
	pktio.Link
	mu sync.Mutex
}

// Write writes bufs under s's lock.
func (s *serialLink) Write(bufs []*packet.Buf) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Link.Write(bufs)
}

// sendVia reads its Link (a UDP socket) and writes to tx (an AF_XDP
// link). Close and Stats are the socket's.
type sendVia struct {
	pktio.Link
	tx *serialLink
}

// Write sends bufs through the AF_XDP link.
func (s *sendVia) Write(bufs []*packet.Buf) (int, error) { return s.tx.Write(bufs) }

// xdpInterface returns the interface AF_XDP is attached to. The rule:
// with [udp] listen on an address, the interface holding that address;
// with a wildcard listen, the interface holding the local addresses of
// the tunnels that use ESP in UDP and of the IKE connections that name
// one; those must all be on one interface. A virtual address of an
// [[ha.group]] is on its dev, whether or not this member holds it now. A loopback interface is
// refused: AF_XDP gains nothing there and has no neighbours to send to.
// ifOf returns the interface holding an address and whether it is a
// loopback.
func xdpInterface(cfg *config.Gateway, ifOf func(netip.Addr) (name string, loopback bool, err error)) (string, error) {
	var addrs []netip.Addr
	if a := cfg.UDP.Listen.Addr(); !a.IsUnspecified() {
		addrs = append(addrs, a)
	} else {
		for _, t := range cfg.Tunnels {
			if t.Encap == config.EncapUDP && t.Local.IsValid() {
				addrs = append(addrs, t.Local)
			}
		}
		for _, c := range cfg.Connections {
			if c.Local.IsValid() && !c.Local.IsUnspecified() {
				addrs = append(addrs, c.Local)
			}
		}
		if len(addrs) == 0 {
			return "", fmt.Errorf("no interface: udp.listen %v is a wildcard and no tunnel or connection names a local address", cfg.UDP.Listen)
		}
	}
	var names []string
	for _, a := range addrs {
		var lo bool
		var err error
		name := haDev(cfg, a)
		if name == "" {
			name, lo, err = ifOf(a)
		}
		if err != nil {
			return "", err
		}
		if lo {
			return "", fmt.Errorf("%s, which holds %v, is a loopback interface", name, a)
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(names) > 1 {
		return "", fmt.Errorf("the local addresses are on %d interfaces (%s); AF_XDP serves one", len(names), strings.Join(names, ", "))
	}
	return names[0], nil
}

// haDev returns the dev of a when it is a virtual address of an
// [[ha.group]], and "" otherwise. A virtual address is on no interface
// while the peer owns its group (a standby starting); the program steers
// its ESP once it arrives, without being attached again.
func haDev(cfg *config.Gateway, a netip.Addr) string {
	if cfg.HA == nil {
		return ""
	}
	a = a.Unmap()
	for _, g := range cfg.HA.Groups {
		for _, v := range g.Addresses {
			if v.Prefix.Addr() == a {
				return v.Dev
			}
		}
	}
	return ""
}

// lookupInterface is interfaceOf; tests replace it.
var lookupInterface = interfaceOf

// interfaceOf finds the interface holding a, in the gateway's network
// namespace, and says whether it is a loopback.
func interfaceOf(a netip.Addr) (string, bool, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", false, fmt.Errorf("listing interfaces: %w", err)
	}
	a = a.Unmap()
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, x := range addrs {
			if n, ok := x.(*net.IPNet); ok {
				if b, ok := netip.AddrFromSlice(n.IP); ok && b.Unmap() == a {
					return ifc.Name, ifc.Flags&net.FlagLoopback != 0, nil
				}
			}
		}
	}
	return "", false, fmt.Errorf("no interface holds %v", a)
}
