package tun_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio/internal/linktest"
)

// An unprivileged program can send an IPv6 UDP super-packet of the
// largest size (40+65535 bytes, more than the 64 KiB Read gathers a
// super-packet of an unexpected shape into). The kernel segments what is
// longer than the device's GSO maximum (64 KiB) before the device sees
// it; whatever reaches Read after a super-packet of another shape must be
// split whole.
func TestSplitLargestIPv6AfterOtherShape(t *testing.T) {
	qs := open(t, 1, true)
	q := qs[0]
	sock := listen6(t)
	rc, _ := sock.SyscallConn()
	c := linktest.Collect(t, q, headroom, slot)
	dst := netip.AddrPortFrom(peer6, 9)
	send := func(seg, total int) {
		t.Helper()
		var serr error
		rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, seg) })
		if serr != nil {
			t.Skipf("no UDP GSO: %v", serr)
		}
		msg := make([]byte, total)
		for i := range msg {
			msg[i] = byte(i/seg + 1)
		}
		if _, err := sock.WriteToUDPAddrPort(msg, dst); err != nil {
			t.Fatalf("send %d bytes in segments of %d: %v", total, seg, err)
		}
		for off := 0; off < total; off += seg {
			p := c.Next(t, func(p []byte) bool { return udpTo(p, dst) })
			u := packet.UDP(p[packet.IPv6Header:])
			if packet.IPv6Header+int(packet.IPv6(p).PayloadLength()) != len(p) || int(u.Length()) != len(u) ||
				!bytes.Equal(payloadOf(p), msg[off:min(off+seg, total)]) {
				t.Fatalf("segments of %d, offset %d: bad packet %x", seg, off, p[:48])
			}
		}
	}
	send(1000, 4000)
	send(1100, 65535-8) // 40+65535 bytes, 60 segments
}

// A UDP packet whose UDP length is shorter than its IP payload (bytes
// trailing the datagram) is delivered by the kernel with the UDP length's
// bytes. Write must not coalesce it into a super-packet (whose UDP length
// is rewritten for the whole, so the trailing bytes would become data).
func TestWriteUDPLengthShorterThanIP(t *testing.T) {
	qs := open(t, 1, true)
	q := qs[0]
	sock := listen6(t)
	to := sock.LocalAddr().(*net.UDPAddr).AddrPort()
	from := netip.AddrPortFrom(peer6, 4242)
	const n, seg, short = 4, 1000, 900
	pool := packet.NewPool(n, slot, headroom)
	bufs := make([]*packet.Buf, n)
	pool.GetN(bufs)
	for i, b := range bufs {
		p := linktest.IPUDP(from, to, bytes.Repeat([]byte{byte(i + 1)}, seg))
		if i == 0 {
			// The datagram is short bytes long; the rest trails it.
			u := packet.UDP(p[packet.IPv6Header:])
			binary.BigEndian.PutUint16(u[4:], 8+short)
			u[6], u[7] = 0, 0
			c := ^packet.Checksum(u[:8+short], packet.PseudoHeaderSum(p[8:24], p[24:40], packet.ProtoUDP, 8+short))
			binary.BigEndian.PutUint16(u[6:], c)
		}
		copy(b.Append(len(p)), p)
	}
	if w, err := q.Write(bufs); w != n || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	readEach(t, sock, n, func(_ int, d []byte) {
		want := seg
		if d[0] == 1 {
			want = short
		}
		if len(d) != want || !bytes.Equal(d, bytes.Repeat(d[:1], len(d))) {
			t.Fatalf("datagram of %d: %d bytes, want %d", d[0], len(d), want)
		}
	})
}

// An unprivileged program's UDP super-packet with a segment routing
// header (IPV6_RTHDR): every segment Read hands out has a UDP checksum
// over the final destination, the routing header's address. (Linux 6.18
// segments such a datagram before the device sees it; TestSplitIPv6-
// RoutingHeader covers a super-packet with a routing header.)
func TestOffloadIPv6RoutingHeader(t *testing.T) {
	qs := open(t, 1, true)
	q := qs[0]
	sock := listen6(t)
	rc, _ := sock.SyscallConn()
	const seg, segs = 500, 3
	final := netip.MustParseAddr("fd99::7")
	// A segment routing header (type 4) of two segments: the packet
	// goes to peer6 (into the device), the checksum covers final.
	rh := make([]byte, 40)
	rh[1], rh[2], rh[3], rh[4] = 4, 4, 1, 1
	p6, f6 := peer6.As16(), final.As16()
	copy(rh[8:], f6[:])
	copy(rh[24:], p6[:])
	var serr error
	rc.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, seg); serr == nil {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RTHDR, string(rh))
		}
	})
	if serr != nil {
		t.Skipf("no UDP GSO or routing header: %v", serr)
	}
	c := linktest.Collect(t, q, headroom, slot)
	msg := bytes.Repeat([]byte{5}, seg*segs)
	if _, err := sock.WriteToUDPAddrPort(msg, netip.AddrPortFrom(final, 9)); err != nil {
		t.Skipf("send with a routing header: %v", err)
	}
	fin := final.As16()
	for i := range segs {
		p := c.Next(t, func(p []byte) bool { return packet.IPVersion(p) == 6 && p[6] == 43 })
		u := p[packet.IPv6Header+len(rh):]
		if len(u) != 8+seg {
			t.Fatalf("segment %d: %d bytes of UDP, want %d", i, len(u), 8+seg)
		}
		if packet.Checksum(u, packet.PseudoHeaderSum(p[8:24], fin[:], packet.ProtoUDP, len(u))) != 0xffff {
			t.Errorf("segment %d: UDP checksum does not verify with the final destination", i)
		}
	}
}
