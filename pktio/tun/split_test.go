package tun

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/pktio"
)

// readCrafted runs Read's split on what a readv of the virtio-net header h
// and the packet p into bufs would have put there, with the layout the
// queue's prediction (hl, gso) gives. It returns the packets and the tally.
func readCrafted(t *testing.T, predHL, predGSO int, h virtioHdr, p []byte, bufs []*packet.Buf) (int, pktio.Tally) {
	t.Helper()
	q := &Queue{
		spill:  make([]byte, 1<<16),
		linear: make([]byte, 1<<16),
		riov:   make([]unix.Iovec, 0, len(bufs)+2),
		rsegs:  make([][]byte, 0, len(bufs)+1),
		predHL: predHL, predGSO: predGSO,
	}
	placed := q.layout(bufs)
	h.encode(q.vhdr[:])
	rest := p
	for _, r := range q.rsegs {
		rest = rest[copy(r, rest):]
	}
	var tally pktio.Tally
	n := q.split(bufs, placed, len(p), &tally)
	return n, tally
}

// tcp4Super builds an IPv4 TCP super-packet of segs segments of gso bytes
// (tcp4's headers: 52 bytes) and its virtio-net header.
func tcp4Super(gso, segs int) (virtioHdr, []byte) {
	p := tcp4(1, tcpACK, gso*segs)
	h := virtioHdr{flags: flagNeedsCsum, gsoType: gsoTCPv4, hdrLen: 52, gsoSize: uint16(gso), csumStart: 20, csumOffset: 16}
	return h, p
}

// A super-packet whose segments are longer than the buffers (a segment
// size beyond the MTU), after one of another shape, is a counted drop: no
// segment is written beyond its buffer.
func TestSplitSegmentLongerThanBuffer(t *testing.T) {
	const headroom, slot = 64, 2048
	for _, pred := range [][2]int{{0, 0}, {52, 1000}} {
		pool := packet.NewPool(8, slot, headroom)
		bufs := make([]*packet.Buf, 8)
		pool.GetN(bufs)
		h, p := tcp4Super(slot-headroom-52+10, 3)
		n, tally := readCrafted(t, pred[0], pred[1], h, p, bufs)
		if n != 0 && tally.RxPackets != uint64(n) {
			t.Errorf("prediction %v: %d packets, tally %+v", pred, n, tally)
		}
		if tally.RxShort+tally.RxErrors == 0 {
			t.Errorf("prediction %v: segments longer than the buffers not counted: %+v", pred, tally)
		}
	}
}

// Odd reads are counted drops or split right, with and without a
// prediction: nothing, only the header, a zero segment size, more
// segments than buffers, a plain packet exactly at and just beyond the
// buffer's room, a partial checksum outside the packet.
func TestSplitOddReads(t *testing.T) {
	const headroom, slot, room = 64, 2048, 2048 - 64
	plain := func(size int) (virtioHdr, []byte) {
		p := tcp4(1, tcpACK, size-52)
		return virtioHdr{}, p
	}
	cases := []struct {
		name          string
		make          func() (virtioHdr, []byte)
		packets, drop int
	}{
		{"nothing", func() (virtioHdr, []byte) { return virtioHdr{}, nil }, 0, 1},
		{"zero segment size", func() (virtioHdr, []byte) { h, p := tcp4Super(100, 3); h.gsoSize = 0; return h, p }, 0, 1},
		{"more segments than buffers", func() (virtioHdr, []byte) { return tcp4Super(100, 20) }, 8, 12},
		{"plain at the room", func() (virtioHdr, []byte) { return plain(room) }, 1, 0},
		{"plain beyond the room", func() (virtioHdr, []byte) { return plain(room + 1) }, 0, 1},
		{"checksum outside", func() (virtioHdr, []byte) {
			h, p := plain(500)
			h.flags, h.csumStart, h.csumOffset = flagNeedsCsum, 20, 500
			return h, p
		}, 0, 1},
		{"TCP data offset beyond", func() (virtioHdr, []byte) {
			h, p := tcp4Super(100, 3)
			p[32] = 15 << 4
			return h, p[:60]
		}, 0, 1},
	}
	for _, c := range cases {
		for _, pred := range [][2]int{{0, 0}, {52, 100}} {
			pool := packet.NewPool(8, slot, headroom)
			bufs := make([]*packet.Buf, 8)
			pool.GetN(bufs)
			h, p := c.make()
			for i := 52; i < len(p); i++ {
				p[i] = byte(i)
			}
			n, tally := readCrafted(t, pred[0], pred[1], h, p, bufs)
			drops := tally.RxErrors + tally.RxShort
			if n != c.packets || drops != uint64(c.drop) {
				t.Errorf("%s, prediction %v: %d packets, %d dropped, want %d, %d", c.name, pred, n, drops, c.packets, c.drop)
				continue
			}
			gso := int(h.gsoSize)
			for i, b := range bufs[:n] {
				q := b.Bytes()
				if h.gsoType == gsoNone {
					if len(q) != len(p) {
						t.Errorf("%s, prediction %v: %d bytes, want %d", c.name, pred, len(q), len(p))
					}
					continue
				}
				for k, x := range q[52:] {
					if x != byte(52+i*gso+k) || len(q) != 52+gso {
						t.Fatalf("%s, prediction %v: segment %d wrong at %d", c.name, pred, i, k)
					}
				}
			}
		}
	}
}

// An IPv6 super-packet with a routing header (which an unprivileged
// program sets with IPV6_RTHDR) has its transport checksum over a pseudo
// header with the final destination, the routing header's address, not
// the IPv6 header's: the kernel's partial checksum says which. Every
// segment's checksum must verify with it.
func TestSplitIPv6RoutingHeader(t *testing.T) {
	const gso, segs, rh = 500, 3, 24
	final := []byte{0xfd, 0x99, 15: 7}
	p := make([]byte, 40+rh+8+gso*segs)
	p[0], p[6], p[7] = 0x60, 43, 64
	binary.BigEndian.PutUint16(p[4:], uint16(len(p)-40))
	p[23], p[39] = 1, 2
	r := p[40:]
	r[0], r[1], r[2], r[3] = packet.ProtoUDP, 2, 2, 1 // type 2, one segment left
	copy(r[8:24], final)
	u := p[40+rh:]
	binary.BigEndian.PutUint16(u[0:], 1000)
	binary.BigEndian.PutUint16(u[2:], 2000)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	for i := 8; i < len(u); i++ {
		u[i] = byte(i)
	}
	// What the kernel leaves for NEEDS_CSUM: the folded pseudo-header sum.
	binary.BigEndian.PutUint16(u[6:], packet.Checksum(nil, packet.PseudoHeaderSum(p[8:24], final, packet.ProtoUDP, len(u))))
	h := virtioHdr{flags: flagNeedsCsum, gsoType: gsoUDPL4, hdrLen: 40 + rh + 8, gsoSize: gso, csumStart: 40 + rh, csumOffset: 6}
	pool := packet.NewPool(8, 2048, 64)
	bufs := make([]*packet.Buf, 8)
	pool.GetN(bufs)
	n, tally := readCrafted(t, 0, 0, h, p, bufs)
	if n != segs {
		t.Fatalf("%d packets, want %d: %+v", n, segs, tally)
	}
	for i, b := range bufs[:n] {
		q := b.Bytes()
		s := q[40+rh:]
		if packet.Checksum(s, packet.PseudoHeaderSum(q[8:24], final, packet.ProtoUDP, len(s))) != 0xffff {
			t.Errorf("segment %d: UDP checksum does not verify with the final destination", i)
		}
	}
}
