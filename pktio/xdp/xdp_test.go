package xdp_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
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
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
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
		})
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
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
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
			for x.Stats().TxPackets.Load() == 0 {
				seq++
				espOut(bufs[0], from, e.peerAddr, 0x3000, seq, 32)
				if n, err := x.Write(bufs[:1]); n != 1 || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
				check(seq, 32)
				if seq > 1000 {
					t.Fatal("the next hop was never resolved")
				}
			}
			if x.Fallbacks() == 0 {
				t.Error("the first packet did not take the fallback")
			}
			before := x.Stats().Snapshot()
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
			if after.TxPackets-before.TxPackets+x.Fallbacks() < uint64(len(bufs)) || after.TxDrops() != 0 {
				t.Errorf("stats before %+v after %+v, %d fallbacks", before, after, x.Fallbacks())
			}
		})
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
