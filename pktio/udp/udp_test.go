package udp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
	"github.com/sluicegw/sluice/pktio/internal/linktest"
	"github.com/sluicegw/sluice/pktio/netutil"
	"github.com/sluicegw/sluice/pktio/udp"
)

const (
	headroom = 128
	slot     = 2048
)

var families = []struct {
	name string
	addr netip.Addr
}{
	{"ipv4", netip.MustParseAddr("127.0.0.1")},
	{"ipv6", netip.MustParseAddr("::1")},
}

func open(t testing.TB, addr netip.Addr, opts udp.Options) *udp.Conn {
	t.Helper()
	l, err := udp.Open(netip.AddrPortFrom(addr, 0), opts)
	if err != nil {
		if addr.Is6() {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.(*udp.Conn)
}

func getBufs(t testing.TB, pool *packet.Pool, n int) []*packet.Buf {
	t.Helper()
	bs := make([]*packet.Buf, n)
	if pool.GetN(bs) != n {
		t.Fatal("pool exhausted")
	}
	return bs
}

// espOut fills b as the ESP layer leaves an ESP-in-UDP packet: outer IP
// and UDP header in front of an ESP packet.
func espOut(b *packet.Buf, from, to netip.AddrPort, tos uint8, spi, seq uint32, n int) {
	b.Reset(headroom)
	copy(b.Append(8+n), linktest.ESP(spi, seq, n))
	linktest.Outer(b, from, to, tos)
}

// readN reads until n packets arrived (bounded by the Collector's timeout
// in callers that use one; here by the count).
func readN(t testing.TB, l pktio.Link, bufs []*packet.Buf, n int) []*packet.Buf {
	t.Helper()
	var got []*packet.Buf
	for len(got) < n {
		for _, b := range bufs {
			b.Reset(headroom)
		}
		k, err := l.Read(bufs)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		for _, b := range bufs[:k] {
			got = append(got, packet.NewBuf(bytes.Clone(b.Slot()), b.Offset(), b.Len()))
		}
	}
	return got
}

// watchdog closes l if the test has not finished in time, so that a Read
// that would block forever fails instead.
func watchdog(t testing.TB, l pktio.Link) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		select {
		case <-done:
		case <-time.After(linktest.Timeout):
			l.Close()
		}
	}()
}

// ESP-in-UDP round trip on loopback: what the sender's Write strips, the
// receiver's Read rebuilds, so that esp.Parse sees the datagram as on the
// wire.
func TestLoopback(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			linktest.NoLeaks(t)
			rx, tx := open(t, f.addr, udp.Options{}), open(t, f.addr, udp.Options{})
			watchdog(t, rx)
			pool := packet.NewPool(64, slot, headroom)
			out, in := getBufs(t, pool, 16), getBufs(t, pool, 32)
			const tos = 0xb8 | 0x02 // EF, ECT(0)
			for i, b := range out {
				espOut(b, tx.LocalAddr(), rx.LocalAddr(), tos, 0x1000, uint32(i+1), 100+i)
			}
			if n, err := tx.Write(out); n != len(out) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			got := readN(t, rx, in, len(out))
			for i, b := range got {
				var pp esp.Parsed
				if r := esp.Parse(b.Bytes(), []uint16{rx.LocalAddr().Port()}, &pp); r != esp.ReasonNone {
					t.Fatalf("packet %d: esp.Parse: %v", i, r)
				}
				if pp.SPI != 0x1000 || !pp.UDP || pp.Src != f.addr || pp.Dst != f.addr ||
					pp.SPort != tx.LocalAddr().Port() || pp.DPort != rx.LocalAddr().Port() {
					t.Errorf("packet %d: parsed %+v", i, pp)
				}
				if !bytes.Equal(b.Bytes()[pp.ESPOff:], linktest.ESP(0x1000, uint32(i+1), 100+i)) {
					t.Errorf("packet %d: ESP payload differs", i)
				}
				if got := tosOf(b.Bytes()); got != tos {
					t.Errorf("packet %d: TOS %#x, want %#x", i, got, tos)
				}
			}
			st, sr := tx.Stats().Snapshot(), rx.Stats().Snapshot()
			if st.TxPackets != 16 || sr.RxPackets != 16 || st.TxDrops() != 0 || sr.RxDrops() != 0 {
				t.Errorf("tx %+v rx %+v", st, sr)
			}
		})
	}
}

func tosOf(p []byte) uint8 {
	if packet.IPVersion(p) == 4 {
		return packet.IPv4(p).TOS()
	}
	return packet.IPv6(p).TrafficClass()
}

// A dual-stack socket rebuilds an IPv4 header for a v4-mapped peer, with
// the destination from IP_PKTINFO, and sends to IPv4 peers.
func TestDualStack(t *testing.T) {
	rx := open(t, netip.IPv6Unspecified(), udp.Options{})
	watchdog(t, rx)
	tx := open(t, netip.MustParseAddr("127.0.0.1"), udp.Options{})
	pool := packet.NewPool(16, slot, headroom)
	out, in := getBufs(t, pool, 1), getBufs(t, pool, 4)
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), rx.LocalAddr().Port())
	espOut(out[0], tx.LocalAddr(), to, 0, 7, 1, 40)
	if _, err := tx.Write(out); err != nil {
		t.Fatal(err)
	}
	got := readN(t, rx, in, 1)[0]
	var pp esp.Parsed
	if r := esp.Parse(got.Bytes(), []uint16{to.Port()}, &pp); r != esp.ReasonNone {
		t.Fatalf("esp.Parse: %v", r)
	}
	if packet.IPVersion(got.Bytes()) != 4 || pp.Src != to.Addr() || pp.Dst != to.Addr() {
		t.Errorf("got %+v, want IPv4 from and to 127.0.0.1", pp)
	}
	// And back: an IPv4 destination on the dual-stack socket.
	espOut(out[0], to, tx.LocalAddr(), 0, 8, 1, 40)
	if n, err := rx.Write(out); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	watchdog(t, tx)
	back := readN(t, tx, in, 1)[0]
	if esp.Parse(back.Bytes(), []uint16{tx.LocalAddr().Port()}, &pp) != esp.ReasonNone || pp.SPI != 8 {
		t.Errorf("reply: %+v", pp)
	}
	if s := rx.Stats().Snapshot(); s.TxPackets != 1 || s.TxDrops() != 0 {
		t.Errorf("dual-stack send: %+v", s)
	}
}

// IKE datagrams (non-ESP marker) and NAT-keepalives are counted and handed
// to Options.Control, never delivered as packets.
func TestIKEAndKeepalive(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			type ctl struct {
				pkt      []byte
				from, to netip.AddrPort
			}
			var seen []ctl
			rx := open(t, f.addr, udp.Options{Control: func(pkt []byte, from, to netip.AddrPort) {
				seen = append(seen, ctl{bytes.Clone(pkt), from, to})
			}})
			watchdog(t, rx)
			tx := open(t, f.addr, udp.Options{})
			pool := packet.NewPool(16, slot, headroom)
			out, in := getBufs(t, pool, 4), getBufs(t, pool, 8)
			ike := append([]byte{0, 0, 0, 0}, []byte("IKE_SA_INIT")...)
			payloads := [][]byte{ike, {0xff}, linktest.ESP(9, 1, 20), linktest.ESP(9, 2, 20)}
			for i, p := range payloads {
				out[i].Reset(headroom)
				copy(out[i].Append(len(p)), p)
				linktest.Outer(out[i], tx.LocalAddr(), rx.LocalAddr(), 0)
			}
			if _, err := tx.Write(out); err != nil {
				t.Fatal(err)
			}
			got := readN(t, rx, in, 2)
			for i, b := range got {
				var pp esp.Parsed
				if r := esp.Parse(b.Bytes(), []uint16{rx.LocalAddr().Port()}, &pp); r != esp.ReasonNone || pp.SPI != 9 {
					t.Errorf("delivered packet %d: %v %+v", i, r, pp)
				}
			}
			s := rx.Stats().Snapshot()
			if s.RxIKE != 1 || s.RxKeepalive != 1 || s.RxPackets != 2 {
				t.Errorf("stats %+v", s)
			}
			if len(seen) != 2 || !bytes.Equal(seen[0].pkt, ike) || !bytes.Equal(seen[1].pkt, []byte{0xff}) ||
				seen[0].from != tx.LocalAddr() || seen[1].from != tx.LocalAddr() || seen[0].to != rx.LocalAddr() {
				t.Errorf("Control saw %+v", seen)
			}
		})
	}
}

// SendDatagram sends a datagram that is not ESP (IKE with its non-ESP
// marker) from the ESP socket, concurrently with the batch path: the peer
// sees it come from the socket's address and port, and a wildcard socket
// learns the destination the datagram was sent to.
func TestSendDatagram(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			got := make(chan [2]netip.AddrPort, 1)
			unspec := netip.IPv4Unspecified()
			if f.addr.Is6() {
				unspec = netip.IPv6Unspecified()
			}
			l, err := udp.Open(netip.AddrPortFrom(unspec, 0), udp.Options{Control: func(pkt []byte, from, to netip.AddrPort) {
				if bytes.Equal(pkt, []byte{0, 0, 0, 0, 'i', 'k', 'e'}) {
					select {
					case got <- [2]netip.AddrPort{from, to}:
					default:
					}
				}
			}})
			if err != nil {
				t.Skipf("no %s wildcard socket: %v", f.name, err)
			}
			rx := l.(*udp.Conn)
			t.Cleanup(func() { rx.Close() })
			watchdog(t, rx)
			tx := open(t, f.addr, udp.Options{})
			to := netip.AddrPortFrom(f.addr, rx.LocalAddr().Port())
			if err := tx.SendDatagram([]byte{0, 0, 0, 0, 'i', 'k', 'e'}, netip.Addr{}, to); err != nil {
				t.Fatal(err)
			}
			go func() {
				pool := packet.NewPool(4, slot, headroom)
				bufs := make([]*packet.Buf, 4)
				pool.GetN(bufs)
				for {
					for _, b := range bufs {
						b.Reset(headroom)
					}
					if _, err := rx.Read(bufs); err != nil {
						return
					}
				}
			}()
			select {
			case ft := <-got:
				if ft[0] != tx.LocalAddr() || ft[1] != to {
					t.Errorf("from %v to %v, want from %v to %v", ft[0], ft[1], tx.LocalAddr(), to)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the datagram did not arrive")
			}
			if err := tx.SendDatagram([]byte{1}, netip.Addr{}, netip.MustParseAddrPort("[2001:db8::1]:4500")); f.addr.Is4() && err == nil {
				t.Error("an IPv4 socket sent to an IPv6 address")
			}
		})
	}
}

// Bad input is a counted drop or an error, never a panic.
func TestBadInput(t *testing.T) {
	rx := open(t, netip.MustParseAddr("127.0.0.1"), udp.Options{})
	watchdog(t, rx)
	tx := open(t, netip.MustParseAddr("127.0.0.1"), udp.Options{})
	pool := packet.NewPool(16, slot, headroom)
	v6 := netip.MustParseAddrPort("[::1]:4500")

	var bad []*packet.Buf
	add := func(f func(b *packet.Buf)) {
		b := pool.Get()
		espOut(b, tx.LocalAddr(), rx.LocalAddr(), 0, 1, 1, 16)
		f(b)
		bad = append(bad, b)
	}
	add(func(b *packet.Buf) { b.TrimFront(5) })                                // not an IP header
	add(func(b *packet.Buf) { b.Reset(headroom) })                             // empty
	add(func(b *packet.Buf) { b.Bytes()[9] = packet.ProtoESP; fixCsum(b) })    // not UDP
	add(func(b *packet.Buf) { binary.BigEndian.PutUint16(b.Bytes()[24:], 3) }) // bad UDP length
	add(func(b *packet.Buf) {                                                  // IPv6 destination on an IPv4 socket
		b.Reset(headroom)
		copy(b.Append(24), linktest.ESP(1, 1, 16))
		linktest.Outer(b, netip.MustParseAddrPort("[::1]:1"), v6, 0)
	})
	good := pool.Get()
	espOut(good, tx.LocalAddr(), rx.LocalAddr(), 0, 2, 1, 16)
	bufs := append(bad, good)
	if n, err := tx.Write(bufs); n != len(bufs) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if s := tx.Stats().Snapshot(); s.TxInvalid != uint64(len(bad)) || s.TxPackets != 1 {
		t.Errorf("tx stats %+v", s)
	}

	// Buffers without the headroom for the synthesised header.
	tight := packet.NewBuf(make([]byte, 256), 8, 0)
	if _, err := rx.Read([]*packet.Buf{tight}); !errors.Is(err, pktio.ErrShortBuffer) {
		t.Errorf("Read with no headroom: %v", err)
	}
	// A datagram longer than the buffer is dropped (and the next read
	// gets the next one).
	espOut(good, tx.LocalAddr(), rx.LocalAddr(), 0, 3, 1, 500)
	if _, err := tx.Write([]*packet.Buf{good}); err != nil {
		t.Fatal(err)
	}
	// (Its window is stale: Read goes by its data offset and slot.)
	small := packet.NewBuf(make([]byte, headroom+100), headroom, 100)
	if n, err := rx.Read([]*packet.Buf{small}); n != 1 || err != nil { // the 24-byte ESP packet sent first
		t.Fatalf("Read = %d, %v", n, err)
	}
	espOut(good, tx.LocalAddr(), rx.LocalAddr(), 0, 4, 1, 16)
	if _, err := tx.Write([]*packet.Buf{good}); err != nil {
		t.Fatal(err)
	}
	small.Reset(headroom)
	if n, err := rx.Read([]*packet.Buf{small}); n != 1 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	if spi := binary.BigEndian.Uint32(small.Bytes()[28:]); spi != 4 {
		t.Errorf("got SPI %d, want 4 (SPI 3 did not fit)", spi)
	}
	if s := rx.Stats().Snapshot(); s.RxShort != 1 || s.RxPackets != 2 {
		t.Errorf("rx stats %+v", s)
	}
}

func fixCsum(b *packet.Buf) { packet.IPv4(b.Bytes()).SetChecksum() }

func TestClose(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			linktest.NoLeaks(t)
			l, err := udp.Open(netip.AddrPortFrom(f.addr, 0), udp.Options{})
			if err != nil {
				t.Skip(err)
			}
			linktest.CheckClose(t, l, headroom)
		})
	}
}

// OpenN: several sockets on one port; the kernel spreads flows (here, 64
// source ports) across them, and each datagram arrives exactly once.
func TestReusePort(t *testing.T) {
	const socks, flows = 4, 64
	linktest.NoLeaks(t)
	links, err := udp.OpenN(netip.MustParseAddrPort("127.0.0.1:0"), socks, udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	port := links[0].(*udp.Conn).LocalAddr().Port()
	cols := make([]*linktest.Collector, socks)
	for i, l := range links {
		if p := l.(*udp.Conn).LocalAddr().Port(); p != port {
			t.Fatalf("socket %d on port %d, want %d", i, p, port)
		}
		cols[i] = linktest.Collect(t, l, headroom, slot)
	}
	// Another OpenN on the same port is not part of the group's
	// exclusive use: a plain Open on it must fail.
	if l, err := udp.Open(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), udp.Options{}); err == nil {
		l.Close()
		t.Error("plain Open joined a reuseport group")
	}
	dst := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)}
	for i := range flows {
		c, err := net.DialUDP("udp4", nil, dst)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(linktest.ESP(uint32(0x2000+i), 1, 32)); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	type arrival struct {
		socket int
		spi    uint32
	}
	merged := make(chan arrival, flows)
	for i, c := range cols {
		go func() {
			for {
				select {
				case p := <-c.Packets:
					merged <- arrival{i, binary.BigEndian.Uint32(p[28:])}
				case <-c.Done():
					return
				}
			}
		}()
	}
	seen := make(map[uint32]int)
	perSocket := make([]int, socks)
	timeout := time.After(linktest.Timeout)
	for n := 0; n < flows; n++ {
		select {
		case a := <-merged:
			seen[a.spi]++
			perSocket[a.socket]++
		case <-timeout:
			t.Fatalf("%d of %d flows arrived", n, flows)
		}
	}
	used := 0
	for i, n := range perSocket {
		if n > 0 {
			used++
		}
		t.Logf("socket %d: %d flows", i, n)
	}
	for spi, n := range seen {
		if n != 1 {
			t.Errorf("SPI %#x arrived %d times", spi, n)
		}
	}
	if used < 2 {
		t.Errorf("all %d flows went to one socket of %d", flows, socks)
	}
}

// GSO on send and GRO on receive over loopback (which keeps UDP GSO
// datagrams whole up to a GRO socket): all packets arrive, in order, with
// their sizes, and the counters show the offloads were used. A small read
// batch checks that segments left over from one Read come out in the next.
func TestGSOGRO(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			tx := open(t, f.addr, udp.Options{GSO: true})
			rx := open(t, f.addr, udp.Options{GRO: true})
			watchdog(t, rx)
			if gso, _ := tx.Offloads(); !gso {
				t.Skip("kernel without UDP GSO")
			}
			if _, gro := rx.Offloads(); !gro {
				t.Skip("kernel without UDP GRO")
			}
			pool := packet.NewPool(128, slot, headroom)
			out, in := getBufs(t, pool, 50), getBufs(t, pool, 7)
			sizes := make([]int, len(out))
			for i, b := range out {
				sizes[i] = 1000
				switch {
				case i == 20:
					sizes[i] = 300 // ends a GSO run
				case i == 35:
					sizes[i] = 1200 // larger: starts a new run
				}
				espOut(b, tx.LocalAddr(), rx.LocalAddr(), 0, 0x3000, uint32(i), sizes[i])
			}
			if n, err := tx.Write(out); n != len(out) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			got := readN(t, rx, in, len(out))
			for i, b := range got {
				var pp esp.Parsed
				if r := esp.Parse(b.Bytes(), []uint16{rx.LocalAddr().Port()}, &pp); r != esp.ReasonNone {
					t.Fatalf("packet %d: %v", i, r)
				}
				if !bytes.Equal(b.Bytes()[pp.ESPOff:], linktest.ESP(0x3000, uint32(i), sizes[i])) {
					t.Fatalf("packet %d: payload differs (len %d, want %d)", i, b.Len()-pp.ESPOff, 8+sizes[i])
				}
			}
			st, sr := tx.Stats().Snapshot(), rx.Stats().Snapshot()
			t.Logf("tx %+v", st)
			t.Logf("rx %+v", sr)
			if st.TxPackets != 50 || st.TxGSO == 0 || sr.RxPackets != 50 || sr.RxGRO == 0 {
				t.Errorf("offloads unused or packets lost")
			}
		})
	}
}

// GSO to a receiver without GRO: the kernel segments, the receiver gets
// separate datagrams.
func TestGSOToPlain(t *testing.T) {
	tx := open(t, netip.MustParseAddr("127.0.0.1"), udp.Options{GSO: true})
	rx := open(t, netip.MustParseAddr("127.0.0.1"), udp.Options{})
	watchdog(t, rx)
	pool := packet.NewPool(64, slot, headroom)
	out, in := getBufs(t, pool, 10), getBufs(t, pool, 16)
	for i, b := range out {
		espOut(b, tx.LocalAddr(), rx.LocalAddr(), 0, 0x4000, uint32(i), 600)
	}
	if _, err := tx.Write(out); err != nil {
		t.Fatal(err)
	}
	got := readN(t, rx, in, len(out))
	for i, b := range got {
		if b.Len() != 28+608 || binary.BigEndian.Uint32(b.Bytes()[32:]) != uint32(i) {
			t.Errorf("packet %d: len %d", i, b.Len())
		}
	}
}

// Bound to the wildcard address, a Conn sends from the source address the
// outer header names (IP_PKTINFO) and reports the destination each
// datagram was sent to.
func TestWildcardSource(t *testing.T) {
	rx := open(t, netip.IPv4Unspecified(), udp.Options{})
	watchdog(t, rx)
	tx := open(t, netip.IPv4Unspecified(), udp.Options{})
	pool := packet.NewPool(8, slot, headroom)
	out, in := getBufs(t, pool, 2), getBufs(t, pool, 4)
	for i, src := range []string{"127.0.0.2", "127.0.0.3"} {
		from := netip.AddrPortFrom(netip.MustParseAddr(src), tx.LocalAddr().Port())
		to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.4"), rx.LocalAddr().Port())
		espOut(out[i], from, to, 0, 0x6000, uint32(i), 32)
	}
	if n, err := tx.Write(out); n != 2 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	for i, b := range readN(t, rx, in, 2) {
		var pp esp.Parsed
		if r := esp.Parse(b.Bytes(), []uint16{rx.LocalAddr().Port()}, &pp); r != esp.ReasonNone {
			t.Fatal(r)
		}
		wantSrc := netip.MustParseAddr([]string{"127.0.0.2", "127.0.0.3"}[i])
		if pp.Src != wantSrc || pp.Dst != netip.MustParseAddr("127.0.0.4") || pp.SPort != tx.LocalAddr().Port() {
			t.Errorf("packet %d: %+v", i, pp)
		}
	}
}

// When the kernel refuses a GSO datagram (here: segments larger than the
// MTU of lo, lowered in a namespace of our own), the Conn resends its
// packets one by one (the kernel fragments them) and loses none.
func TestGSOFallback(t *testing.T) {
	linktest.InNewNetns(t)
	if err := netutil.SetMTU("lo", 1500); err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddr("127.0.0.1")
	tx := open(t, addr, udp.Options{GSO: true})
	rx := open(t, addr, udp.Options{})
	watchdog(t, rx)
	if gso, _ := tx.Offloads(); !gso {
		t.Skip("kernel without UDP GSO")
	}
	pool := packet.NewPool(64, slot, headroom)
	out, in := getBufs(t, pool, 10), getBufs(t, pool, 16)
	for i, b := range out {
		espOut(b, tx.LocalAddr(), rx.LocalAddr(), 0, 0x7000, uint32(i), 1600)
	}
	if n, err := tx.Write(out); n != len(out) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got := readN(t, rx, in, len(out))
	for i, b := range got {
		if b.Len() != 28+1608 || binary.BigEndian.Uint32(b.Bytes()[32:]) != uint32(i) {
			t.Errorf("packet %d: len %d", i, b.Len())
		}
	}
	// Ten equal packets to one destination make one GSO datagram; none
	// went out as GSO, so the refusal was handled by resending.
	s := tx.Stats().Snapshot()
	if s.TxPackets != 10 || s.TxGSO != 0 || s.TxDrops() != 0 {
		t.Errorf("stats %+v", s)
	}
	if gso, _ := tx.Offloads(); !gso {
		t.Error("GSO turned off for good by a per-datagram refusal (EINVAL, not EIO)")
	}
}

// Read and Write allocate nothing per batch in steady state, with and
// without the offloads.
func TestAllocs(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts udp.Options
	}{{"plain", udp.Options{}}, {"gso-gro", udp.Options{GSO: true, GRO: true}}} {
		for _, f := range families {
			t.Run(tc.name+"/"+f.name, func(t *testing.T) {
				tx, rx := open(t, f.addr, tc.opts), open(t, f.addr, tc.opts)
				watchdog(t, rx)
				pool := packet.NewPool(128, slot, headroom)
				out, in := getBufs(t, pool, 32), getBufs(t, pool, 64)
				for i, b := range out {
					espOut(b, tx.LocalAddr(), rx.LocalAddr(), 0, 0x5000, uint32(i), 1000)
				}
				round := func() {
					// Write leaves the packets as they were: no rebuild.
					if _, err := tx.Write(out); err != nil {
						t.Fatal(err)
					}
					for got := 0; got < len(out); {
						for _, b := range in {
							b.Reset(headroom)
						}
						n, err := rx.Read(in)
						if err != nil {
							t.Fatal(err)
						}
						got += n
					}
				}
				round()
				if a := testing.AllocsPerRun(50, round); a != 0 {
					t.Errorf("%v allocations per batch of %d", a, len(out))
				}
			})
		}
	}
}

func BenchmarkLoopback(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts udp.Options
	}{{"plain", udp.Options{}}, {"gso-gro", udp.Options{GSO: true, GRO: true}}} {
		b.Run(tc.name, func(b *testing.B) {
			addr := netip.MustParseAddr("127.0.0.1")
			tx, rx := open(b, addr, tc.opts), open(b, addr, tc.opts)
			pool := packet.NewPool(256, slot, headroom)
			out, in := getBufs(b, pool, 64), getBufs(b, pool, 128)
			const size = 1400
			b.SetBytes(int64(len(out) * size))
			for i, p := range out {
				espOut(p, tx.LocalAddr(), rx.LocalAddr(), 0, 1, uint32(i), size-8)
			}
			b.ReportAllocs()
			for b.Loop() {
				tx.Write(out)
				for got := 0; got < len(out); {
					for _, p := range in {
						p.Reset(headroom)
					}
					n, err := rx.Read(in)
					if err != nil {
						b.Fatal(err)
					}
					got += n
				}
			}
		})
	}
}
