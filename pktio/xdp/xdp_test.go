package xdp_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/internal/lab"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/internal/linktest"
	"github.com/sluicegw/sluice/pktio/udp"
	"github.com/sluicegw/sluice/pktio/xdp"
)

const (
	headroom = 128
	slot     = 2048
	port     = 4500
	ifname   = "x0"
)

var (
	gw4, peer4 = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	gw6, peer6 = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
)

// attachModes are the program's attachments the tests run in: native
// (veth has XDP) and generic (forced, as on a driver without).
var attachModes = []struct {
	name    string
	generic bool
}{
	{"native", false},
	{"generic", true},
}

var families = []struct {
	name     string
	gw, peer netip.Addr
}{
	{"ipv4", gw4, peer4},
	{"ipv6", gw6, peer6},
}

// env is a gateway namespace (gw) joined by a veth to a peer namespace,
// with the XDP Links on the gateway's end and, if asked, a UDP socket
// Link on port 4500 as their fallback (and the kernel's receiver of what
// the program passes).
type env struct {
	gw, peer *lab.Netns
	links    []pktio.Link
	sock     pktio.Link     // the fallback, or nil
	control  chan []byte    // what the fallback's Control saw (IKE, keepalives)
	peerConn *net.UDPConn   // a socket in the peer namespace
	peerAddr netip.AddrPort // its address (IPv4 or IPv6 as the family asks)
	lab      *lab.Lab
	ctx      context.Context
}

func setup(t *testing.T, fam netip.Addr, opts xdp.Options, fallback bool) *env {
	t.Helper()
	lab.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*linktest.Timeout)
	t.Cleanup(cancel)
	l := lab.NewForTest(t, nil)
	e := &env{lab: l, ctx: ctx, control: make(chan []byte, 16)}
	var err error
	if e.gw, err = l.NewNetns(ctx, "gw"); err != nil {
		t.Fatal(err)
	}
	if e.peer, err = l.NewNetns(ctx, "peer"); err != nil {
		t.Fatal(err)
	}
	if err := l.Veth(e.gw, ifname, e.peer, ifname); err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		ns *lab.Netns
		p  string
	}{
		{e.gw, "192.0.2.1/24"}, {e.gw, "2001:db8::1/64"},
		{e.peer, "192.0.2.2/24"}, {e.peer, "2001:db8::2/64"},
	} {
		if err := a.ns.AddAddr(ifname, netip.MustParsePrefix(a.p)); err != nil {
			t.Fatal(err)
		}
	}
	peerIP := peer4
	if fam.Is6() {
		peerIP = peer6
	}
	if e.peerConn, err = e.peer.ListenUDP(netip.AddrPortFrom(peerIP, 0)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.peerConn.Close() })
	e.peerAddr = e.peerConn.LocalAddr().(*net.UDPAddr).AddrPort()
	linktest.NoLeaks(t)
	err = e.gw.Do(func() error {
		if fallback {
			s, err := udp.Open(netip.AddrPortFrom(netip.IPv6Unspecified(), port), udp.Options{
				Control: func(pkt []byte, _, _ netip.AddrPort) {
					select {
					case e.control <- bytes.Clone(pkt):
					default:
					}
				},
			})
			if err != nil {
				return err
			}
			e.sock = s
			// Only queue 0's Link writes in these tests.
			opts.Fallback = []pktio.Link{s, s, s, s, s, s, s, s}
			opts.Queues = min(opts.Queues, len(opts.Fallback))
		}
		var err error
		e.links, err = xdp.Open(ifname, opts)
		return err
	})
	if e.sock != nil {
		t.Cleanup(func() { e.sock.Close() })
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		for _, l := range e.links {
			l.Close()
		}
	})
	t.Logf("mode %q, %d queue(s)", xdp.Mode(e.links[0]), len(e.links))
	return e
}

// send sends p from the peer's socket to the gateway's port.
func (e *env) send(t *testing.T, to netip.Addr, p []byte) {
	t.Helper()
	if _, err := e.peerConn.WriteToUDPAddrPort(p, netip.AddrPortFrom(to, port)); err != nil {
		t.Fatal(err)
	}
}

// recv reads one datagram at the peer.
func (e *env) recv(t *testing.T) ([]byte, netip.AddrPort) {
	t.Helper()
	e.peerConn.SetReadDeadline(time.Now().Add(linktest.Timeout))
	buf := make([]byte, 4096)
	n, from, err := e.peerConn.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("peer: %v", err)
	}
	return buf[:n], from
}

// Read delivers ESP-in-UDP to the gateway's address as udp.Conn would
// (esp.Parse takes it), while IKE and NAT-keepalives on the same port
// reach the kernel's socket, and nothing ESP does.
func TestReceive(t *testing.T) {
	for _, m := range attachModes {
		for _, f := range families {
			t.Run(m.name+"/"+f.name, func(t *testing.T) {
				if m.generic {
					t.Cleanup(xdp.SetGenericOnly())
				}
				testReceive(t, f.gw, f.peer)
			})
		}
	}
}

func testReceive(t *testing.T, gw, peer netip.Addr) {
	f := struct{ gw, peer netip.Addr }{gw, peer}
	{
		{
			e := setup(t, f.gw, xdp.Options{Local: netip.AddrPortFrom(netip.IPv6Unspecified(), port)}, true)
			cols := make([]*linktest.Collector, len(e.links))
			for i, l := range e.links {
				cols[i] = linktest.Collect(t, l, headroom, slot)
			}
			ctl := linktest.Collect(t, e.sock, headroom, slot)
			ike := append([]byte{0, 0, 0, 0}, "IKE_SA_INIT"...)
			e.send(t, f.gw, ike)
			e.send(t, f.gw, []byte{0xff})
			for i := range 8 {
				e.send(t, f.gw, linktest.ESP(0x2000, uint32(i+1), 60+i))
			}
			got := collect(t, cols, 8)
			for i := range 8 {
				p := got[i]
				var pp esp.Parsed
				if r := esp.Parse(p, []uint16{port}, &pp); r != esp.ReasonNone {
					t.Fatalf("packet %d: esp.Parse: %v (% x)", i, r, p)
				}
				if pp.SPI != 0x2000 || !pp.UDP || pp.Src != f.peer || pp.Dst != f.gw ||
					pp.SPort != e.peerAddr.Port() || pp.DPort != port {
					t.Errorf("packet %d: parsed %+v", i, pp)
				}
				if !bytes.Equal(p[pp.ESPOff:], linktest.ESP(0x2000, uint32(i+1), 60+i)) {
					t.Errorf("packet %d: ESP differs", i)
				}
			}
			for _, want := range [][]byte{ike, {0xff}} {
				select {
				case got := <-e.control:
					if !bytes.Equal(got, want) {
						t.Errorf("kernel socket got % x, want % x", got, want)
					}
				case <-time.After(linktest.Timeout):
					t.Fatalf("kernel socket did not get % x", want)
				}
			}
			select {
			case p := <-ctl.Packets:
				t.Errorf("kernel socket got an ESP packet: % x", p)
			default:
			}
			var rx, drops uint64
			for _, l := range e.links {
				s := l.Stats().Snapshot()
				rx, drops = rx+s.RxPackets, drops+s.RxDrops()
			}
			if rx != 8 || drops != 0 {
				t.Errorf("xdp links received %d, dropped %d", rx, drops)
			}
			// Copy mode never asks for a wake-up of the fill ring, so
			// Read makes no system call per batch for it.
			for _, l := range e.links {
				if strings.HasPrefix(xdp.Mode(l), "copy") && xdp.FillNeedsWakeup(l.(*xdp.Link)) {
					t.Errorf("fill ring asks for wake-ups in %s mode", xdp.Mode(l))
				}
			}
		}
	}
}

// collect gathers n packets from the collectors of all queues, in the
// order of their sequence numbers (one flow keeps one queue, so the order
// within it is the order sent).
func collect(t *testing.T, cols []*linktest.Collector, n int) [][]byte {
	t.Helper()
	var got [][]byte
	deadline := time.After(linktest.Timeout)
	for len(got) < n {
		for _, c := range cols {
			select {
			case p := <-c.Packets:
				got = append(got, p)
			default:
			}
		}
		if len(got) < n {
			select {
			case <-deadline:
				t.Fatalf("%d packets of %d within %v", len(got), n, linktest.Timeout)
			case <-time.After(time.Millisecond):
			}
		}
	}
	return got
}

// espOut fills b as the ESP layer leaves an ESP-in-UDP packet.
func espOut(b *packet.Buf, from, to netip.AddrPort, spi, seq uint32, n int) {
	b.Reset(headroom)
	copy(b.Append(8+n), linktest.ESP(spi, seq, n))
	linktest.Outer(b, from, to, 0)
}

// Write sends through the UMEM once the next hop is known, and through the
// fallback socket before: the peer gets every packet either way, with a
// UDP checksum the kernel accepts (IPv6 needs one).
func TestSend(t *testing.T) {
	for _, m := range attachModes {
		for _, f := range families {
			t.Run(m.name+"/"+f.name, func(t *testing.T) {
				if m.generic {
					t.Cleanup(xdp.SetGenericOnly())
				}
				testSend(t, f.gw, f.peer)
			})
		}
	}
}

func testSend(t *testing.T, gw, peer netip.Addr) {
	f := struct{ gw, peer netip.Addr }{gw, peer}
	{
		{
			e := setup(t, f.gw, xdp.Options{Local: netip.AddrPortFrom(f.gw, port)}, true)
			x := e.links[0].(*xdp.Link)
			pool := packet.NewPool(32, slot, headroom)
			bufs := make([]*packet.Buf, 16)
			pool.GetN(bufs)
			from := netip.AddrPortFrom(f.gw, port)
			check := func(seq uint32, n int) {
				t.Helper()
				p, src := e.recv(t)
				if src != from || !bytes.Equal(p, linktest.ESP(0x3000, seq, n)) {
					t.Fatalf("peer got % x from %v, want seq %d from %v", p, src, seq, from)
				}
			}
			// Until the neighbour is resolved, packets take the socket.
			seq := uint32(0)
			deadline := time.Now().Add(linktest.Timeout)
			for x.Stats().TxPackets.Load() == 0 {
				seq++
				espOut(bufs[0], from, e.peerAddr, 0x3000, seq, 32)
				if n, err := x.Write(bufs[:1]); n != 1 || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
				check(seq, 32)
				if time.Now().After(deadline) {
					t.Fatal("the next hop was never resolved")
				}
			}
			if x.Fallbacks() == 0 {
				t.Error("the first packet did not take the fallback")
			}
			before, fb := x.Stats().Snapshot(), x.Fallbacks()
			for i, b := range bufs {
				espOut(b, from, e.peerAddr, 0x3000, seq+uint32(i+1), 100+i)
			}
			if n, err := x.Write(bufs); n != len(bufs) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			for i := range bufs {
				check(seq+uint32(i+1), 100+i)
			}
			after := x.Stats().Snapshot()
			if after.TxPackets-before.TxPackets+x.Fallbacks()-fb != uint64(len(bufs)) || after.TxDrops() != 0 {
				t.Errorf("stats before %+v after %+v, %d fallbacks", before, after, x.Fallbacks())
			}
		}
	}
}

// Without a fallback, a packet to a next hop that does not answer is
// counted as a transmit error; malformed packets are counted as invalid.
func TestWriteDrops(t *testing.T) {
	e := setup(t, gw4, xdp.Options{Local: netip.AddrPortFrom(gw4, port)}, false)
	x := e.links[0].(*xdp.Link)
	pool := packet.NewPool(8, slot, headroom)
	bufs := make([]*packet.Buf, 4)
	pool.GetN(bufs)
	espOut(bufs[0], netip.AddrPortFrom(gw4, port), netip.MustParseAddrPort("192.0.2.99:4500"), 1, 1, 20)
	bufs[1].Reset(headroom)
	copy(bufs[1].Append(40), []byte{0x45, 0, 0, 200}) // length beyond the packet
	espOut(bufs[2], netip.AddrPortFrom(gw4, port), netip.AddrPortFrom(peer4, port), 1, 1, 20)
	packet.IPv4(bufs[2].Bytes()).SetProtocol(packet.ProtoTCP)
	bufs[3].Reset(headroom) // empty
	if n, err := x.Write(bufs); n != 4 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	s := x.Stats().Snapshot()
	if s.TxErrors != 1 || s.TxInvalid != 3 || s.TxPackets != 0 || x.Fallbacks() != 1 {
		t.Errorf("stats %+v, %d fallbacks", s, x.Fallbacks())
	}
}

// The Link contract: Close unblocks a blocked Read, is idempotent, and
// Read and Write after it fail with ErrClosed; closing the last Link
// detaches the program.
func TestClose(t *testing.T) {
	e := setup(t, gw4, xdp.Options{Local: netip.AddrPortFrom(gw4, port)}, false)
	if !attached(t, e) {
		t.Fatal("no XDP program on the interface after Open")
	}
	linktest.CheckClose(t, e.links[0], headroom)
	for _, l := range e.links {
		l.Close()
	}
	if attached(t, e) {
		t.Error("XDP program still attached after the last Close")
	}
}

func attached(t *testing.T, e *env) bool {
	t.Helper()
	var on bool
	err := e.gw.Do(func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		on = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return on
}

// Read refuses buffers without the headroom for the outer headers.
func TestShortBuffer(t *testing.T) {
	e := setup(t, gw6, xdp.Options{Local: netip.AddrPortFrom(gw6, port)}, false)
	pool := packet.NewPool(1, slot, 8)
	bufs := make([]*packet.Buf, 1)
	pool.GetN(bufs)
	if _, err := e.links[0].Read(bufs); err != pktio.ErrShortBuffer {
		t.Fatalf("Read with 8 bytes of headroom: %v, want ErrShortBuffer", err)
	}
}

// Read and Write allocate nothing per packet (DESIGN.md decision 10).
func TestAllocs(t *testing.T) {
	e := setup(t, gw4, xdp.Options{Local: netip.AddrPortFrom(gw4, port), Queues: 1}, true)
	x := e.links[0].(*xdp.Link)
	pool := packet.NewPool(4, slot, headroom)
	bufs := make([]*packet.Buf, 1)
	pool.GetN(bufs)
	from := netip.AddrPortFrom(gw4, port)
	// Resolve the next hop first: until then packets take the fallback.
	deadline := time.Now().Add(linktest.Timeout)
	for seq := uint32(1); x.Stats().TxPackets.Load() == 0; seq++ {
		espOut(bufs[0], from, e.peerAddr, 0x4000, seq, 64)
		if _, err := x.Write(bufs); err != nil {
			t.Fatal(err)
		}
		e.recv(t)
		if time.Now().After(deadline) {
			t.Fatal("the next hop was never resolved")
		}
	}
	// Many runs, so that the resolver's refresh (once a second, on its
	// own goroutine) cannot add up to one allocation per run.
	const runs = 1000
	espOut(bufs[0], from, e.peerAddr, 0x4000, 1, 64)
	pkt := bytes.Clone(bufs[0].Bytes())
	if a := testing.AllocsPerRun(runs, func() {
		bufs[0].Reset(headroom - len(pkt))
		copy(bufs[0].Append(len(pkt)), pkt)
		if n, err := x.Write(bufs); n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}); a != 0 {
		t.Errorf("Write: %v allocations per packet", a)
	}

	for i := range runs + 1 {
		e.send(t, gw4, linktest.ESP(0x5000, uint32(i+1), 64))
	}
	linktest.WaitFor(t, "the packets in the RX ring", func() bool { return xdp.RxPending(x) >= runs+1 })
	if a := testing.AllocsPerRun(runs, func() {
		bufs[0].Reset(headroom)
		if n, err := x.Read(bufs); n != 1 || err != nil {
			t.Fatalf("Read = %d, %v", n, err)
		}
	}); a != 0 {
		t.Errorf("Read: %v allocations per packet", a)
	}
}

// With RawESP, IP protocol 50 to the gateway's address is delivered with
// its IP header (as rawesp delivers it); without, it reaches the kernel.
func TestRawESP(t *testing.T) {
	for _, f := range families {
		for _, raw := range []bool{true, false} {
			name := f.name + "/steered"
			if !raw {
				name = f.name + "/passed"
			}
			t.Run(name, func(t *testing.T) {
				e := setup(t, f.gw, xdp.Options{Local: netip.AddrPortFrom(f.gw, port), RawESP: raw}, false)
				network := "ip4:50"
				if f.gw.Is6() {
					network = "ip6:50"
				}
				var kernel net.PacketConn
				if err := e.gw.Do(func() (err error) {
					kernel, err = net.ListenPacket(network, f.gw.String())
					return err
				}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { kernel.Close() })
				var sender net.PacketConn
				if err := e.peer.Do(func() (err error) {
					sender, err = net.ListenPacket(network, f.peer.String())
					return err
				}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { sender.Close() })
				cols := make([]*linktest.Collector, len(e.links))
				for i, l := range e.links {
					cols[i] = linktest.Collect(t, l, headroom, slot)
				}
				want := linktest.ESP(0x6000, 1, 40)
				if _, err := sender.WriteTo(want, &net.IPAddr{IP: f.gw.AsSlice()}); err != nil {
					t.Fatal(err)
				}
				if raw {
					p := collect(t, cols, 1)[0]
					var pp esp.Parsed
					if r := esp.Parse(p, []uint16{port}, &pp); r != esp.ReasonNone || pp.UDP || pp.SPI != 0x6000 ||
						pp.Src != f.peer || pp.Dst != f.gw || !bytes.Equal(p[pp.ESPOff:], want) {
						t.Fatalf("esp.Parse: %v, %+v (% x)", r, pp, p)
					}
					return
				}
				kernel.SetReadDeadline(time.Now().Add(linktest.Timeout))
				buf := make([]byte, 2048)
				n, _, err := kernel.ReadFrom(buf)
				if err != nil {
					t.Fatalf("kernel raw socket: %v", err)
				}
				if !bytes.HasSuffix(buf[:n], want) {
					t.Errorf("kernel raw socket got % x", buf[:n])
				}
				for _, l := range e.links {
					if s := l.Stats().Snapshot(); s.RxPackets != 0 {
						t.Errorf("xdp link received %d packets", s.RxPackets)
					}
				}
			})
		}
	}
}

// With a wildcard Local, an address added to the interface after Open is
// steered too (within the resolver's refresh); with a specific Local, ESP
// to another address of the interface goes to the kernel.
func TestAddresses(t *testing.T) {
	other := netip.MustParseAddr("192.0.2.3")
	t.Run("wildcard", func(t *testing.T) {
		e := setup(t, gw4, xdp.Options{Local: netip.AddrPortFrom(netip.IPv4Unspecified(), port)}, true)
		for _, l := range e.links {
			linktest.Collect(t, l, headroom, slot)
		}
		linktest.Collect(t, e.sock, headroom, slot)
		if err := e.gw.AddAddr(ifname, netip.MustParsePrefix("192.0.2.3/24")); err != nil {
			t.Fatal(err)
		}
		seq := uint32(0)
		linktest.WaitFor(t, "ESP to the new address on the XDP link", func() bool {
			seq++
			e.send(t, other, linktest.ESP(0x8000, seq, 20))
			for _, l := range e.links {
				if l.Stats().RxPackets.Load() > 0 {
					return true
				}
			}
			return false
		})
	})
	t.Run("specific", func(t *testing.T) {
		e := setup(t, gw4, xdp.Options{Local: netip.AddrPortFrom(gw4, port)}, true)
		if err := e.gw.AddAddr(ifname, netip.MustParsePrefix("192.0.2.3/24")); err != nil {
			t.Fatal(err)
		}
		for _, l := range e.links {
			linktest.Collect(t, l, headroom, slot)
		}
		kernel := linktest.Collect(t, e.sock, headroom, slot)
		want := linktest.ESP(0x8000, 1, 20)
		e.send(t, other, want)
		if p := kernel.Next(t, nil); !bytes.HasSuffix(p, want) {
			t.Errorf("kernel socket got % x", p)
		}
		for _, l := range e.links {
			if n := l.Stats().RxPackets.Load(); n != 0 {
				t.Errorf("xdp link received %d packets", n)
			}
		}
	})
}

// A long burst recycles the TX frames through the completion ring: far
// more packets than frames leave, every one is accounted for, and Write
// never blocks for long.
func TestSendBurst(t *testing.T) {
	e := setup(t, gw4, xdp.Options{Local: netip.AddrPortFrom(gw4, port), Queues: 1, Frames: 256}, true)
	x := e.links[0].(*xdp.Link)
	pool := packet.NewPool(pktio.DefaultBatchSize, slot, headroom)
	bufs := make([]*packet.Buf, pktio.DefaultBatchSize)
	pool.GetN(bufs)
	from := netip.AddrPortFrom(gw4, port)
	deadline := time.Now().Add(linktest.Timeout)
	for seq := uint32(1); x.Stats().TxPackets.Load() == 0; seq++ {
		espOut(bufs[0], from, e.peerAddr, 0x9000, seq, 64)
		if _, err := x.Write(bufs[:1]); err != nil {
			t.Fatal(err)
		}
		e.recv(t)
		if time.Now().After(deadline) {
			t.Fatal("the next hop was never resolved")
		}
	}
	before, fb := x.Stats().Snapshot(), x.Fallbacks()
	const rounds = 100
	for r := range rounds {
		for i, b := range bufs {
			espOut(b, from, e.peerAddr, 0x9000, uint32(r*len(bufs)+i), 1000)
		}
		if n, err := x.Write(bufs); n != len(bufs) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	after := x.Stats().Snapshot()
	sent, full, fell := after.TxPackets-before.TxPackets, after.TxFull-before.TxFull, x.Fallbacks()-fb
	if sent+full+fell != rounds*uint64(len(bufs)) || sent < 10*128 {
		t.Errorf("%d sent, %d dropped for want of a frame, %d to the fallback, of %d (128 TX frames)", sent, full, fell, rounds*len(bufs))
	}
	t.Logf("%d sent, %d TxFull, %d fallback", sent, full, fell)
}

// Open refuses with an error (the gateway's cue to fall back to sockets)
// what it cannot serve: no port, no such interface, an interface that
// already has an XDP program, an MTU that does not fit a frame.
func TestOpenErrors(t *testing.T) {
	e := setup(t, gw4, xdp.Options{Local: netip.AddrPortFrom(gw4, port)}, false)
	open := func(ifn string, opts xdp.Options) error {
		var ls []pktio.Link
		err := e.gw.Do(func() (err error) {
			ls, err = xdp.Open(ifn, opts)
			return err
		})
		for _, l := range ls {
			l.Close()
		}
		return err
	}
	local := netip.AddrPortFrom(gw4, port)
	for _, c := range []struct {
		name, ifn string
		opts      xdp.Options
		want      string
	}{
		{"no port", ifname, xdp.Options{Local: netip.AddrPortFrom(gw4, 0)}, "needs a port"},
		{"no interface", "nothere0", xdp.Options{Local: local}, "interface nothere0"},
		{"attached", ifname, xdp.Options{Local: local}, "attach program"},
	} {
		if err := open(c.ifn, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Open: %v, want an error with %q", c.name, err, c.want)
		}
	}
	for _, l := range e.links {
		l.Close()
	}
	if err := e.gw.Do(func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		return netlink.LinkSetMTU(l, 9000)
	}); err != nil {
		t.Fatal(err)
	}
	if err := open(ifname, xdp.Options{Local: local}); err == nil || !strings.Contains(err.Error(), "MTU 9000") {
		t.Errorf("MTU 9000: Open: %v", err)
	}
}

// On a veth with two queues in use, Open binds a socket to each; flows
// spread over both, and the two Links together deliver every packet.
func TestQueues(t *testing.T) {
	e := setup(t, gw4, xdp.Options{Local: netip.AddrPortFrom(gw4, port)}, false)
	for _, l := range e.links {
		l.Close()
	}
	const mq = "m0"
	if out, err := e.gw.Exec(e.ctx, "ip", "link", "add", mq, "numtxqueues", "2", "numrxqueues", "2", "type", "veth",
		"peer", "name", mq, "netns", e.peer.Name(), "numtxqueues", "2", "numrxqueues", "2"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, a := range []struct {
		ns *lab.Netns
		p  string
	}{{e.gw, "198.51.100.1/24"}, {e.peer, "198.51.100.2/24"}} {
		if err := a.ns.LinkUp(mq); err != nil {
			t.Fatal(err)
		}
		if err := a.ns.AddAddr(mq, netip.MustParsePrefix(a.p)); err != nil {
			t.Fatal(err)
		}
	}
	gw := netip.MustParseAddr("198.51.100.1")
	var links []pktio.Link
	if err := e.gw.Do(func() (err error) {
		links, err = xdp.Open(mq, xdp.Options{Local: netip.AddrPortFrom(gw, port)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(links) != 2 {
		t.Fatalf("%d Links, want 2", len(links))
	}
	cols := make([]*linktest.Collector, len(links))
	for i, l := range links {
		cols[i] = linktest.Collect(t, l, headroom, slot)
	}
	const flows, per = 16, 4
	for f := range flows {
		c, err := e.peer.ListenUDP(netip.MustParseAddrPort("198.51.100.2:0"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range per {
			if _, err := c.WriteToUDPAddrPort(linktest.ESP(uint32(0xa000+f), uint32(i+1), 30), netip.AddrPortFrom(gw, port)); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
	}
	collect(t, cols, flows*per)
	for i, l := range links {
		n := l.Stats().RxPackets.Load()
		t.Logf("queue %d (Link.Queue %d): %d packets", i, l.(*xdp.Link).Queue(), n)
		if n == 0 {
			t.Errorf("queue %d received nothing of %d flows", i, flows)
		}
	}
}

// ZeroCopy asks the kernel's netdev family before anything is attached,
// and agrees with the mode Open then binds (veth: copy only).
func TestZeroCopy(t *testing.T) {
	e := setup(t, gw4, xdp.Options{Local: netip.AddrPortFrom(gw4, port)}, false)
	if err := e.gw.Do(func() error {
		zc, err := xdp.ZeroCopy(ifname)
		if err != nil {
			return err
		}
		if mode := xdp.Mode(e.links[0]); zc != strings.HasPrefix(mode, "zerocopy") {
			t.Errorf("ZeroCopy(%s) = %v, but Open bound %q", ifname, zc, mode)
		}
		if _, err := xdp.ZeroCopy("nothere0"); err == nil || !strings.Contains(err.Error(), "interface nothere0") {
			t.Errorf("ZeroCopy(nothere0): %v, want an error naming the interface", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
