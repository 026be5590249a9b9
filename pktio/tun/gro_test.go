package tun

import (
	"encoding/binary"
	"testing"

	"github.com/sluicegw/sluice/packet"
)

// tcp4 builds an IPv4 TCP packet for the coalescing tests (checksums are
// not looked at).
func tcp4(seq uint32, flags byte, payload int) []byte {
	p := make([]byte, 20+32+payload)
	p[0], p[8], p[9] = 0x45, 64, packet.ProtoTCP
	p[6] = 0x40 // DF
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	copy(p[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	t := p[20:]
	binary.BigEndian.PutUint16(t[0:], 1000)
	binary.BigEndian.PutUint16(t[2:], 2000)
	binary.BigEndian.PutUint32(t[4:], seq)
	binary.BigEndian.PutUint32(t[8:], 77)
	t[12] = 8 << 4
	t[13] = flags
	copy(t[20:], []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}) // NOP NOP timestamps
	return p
}

// udp6 builds an IPv6 UDP packet.
func udp6(payload int) []byte {
	p := make([]byte, 40+8+payload)
	p[0], p[6], p[7] = 0x60, packet.ProtoUDP, 64
	binary.BigEndian.PutUint16(p[4:], uint16(8+payload))
	p[23], p[39] = 1, 2
	binary.BigEndian.PutUint16(p[40:], 1000)
	binary.BigEndian.PutUint16(p[42:], 2000)
	binary.BigEndian.PutUint16(p[44:], uint16(8+payload))
	return p
}

// runEnd joins exactly the packets the receiving kernel's GRO would have
// merged, and stops at everything that would make the super-packet say
// something else than the packets did.
func TestRunEnd(t *testing.T) {
	const seg = 1000
	run := func(n int) [][]byte {
		var ps [][]byte
		for i := range n {
			ps = append(ps, tcp4(uint32(1+i*seg), tcpACK, seg))
		}
		return ps
	}
	cases := []struct {
		name   string
		pkts   func() [][]byte
		uso    bool
		starts []int // where each write begins
	}{
		{"run", func() [][]byte { return run(4) }, false, []int{0}},
		{"PSH on the last", func() [][]byte {
			ps := run(4)
			ps[3][20+13] |= tcpPSH
			return ps
		}, false, []int{0}},
		{"PSH in the middle", func() [][]byte {
			ps := run(4)
			ps[1][20+13] |= tcpPSH
			return ps
		}, false, []int{0, 2}},
		{"sequence gap", func() [][]byte {
			ps := run(4)
			binary.BigEndian.PutUint32(ps[2][24:], 5000)
			binary.BigEndian.PutUint32(ps[3][24:], 5000+seg)
			return ps
		}, false, []int{0, 2}},
		{"other ack", func() [][]byte {
			ps := run(4)
			ps[2][20+11]++
			ps[3][20+11]++
			return ps
		}, false, []int{0, 2}},
		{"other options", func() [][]byte {
			ps := run(4)
			ps[1][20+31]++ // timestamp echo
			return ps
		}, false, []int{0, 1, 2}},
		{"other TTL", func() [][]byte {
			ps := run(3)
			ps[2][8]--
			return ps
		}, false, []int{0, 2}},
		{"other TOS (ECN)", func() [][]byte {
			ps := run(3)
			ps[1][1] = 3
			return ps
		}, false, []int{0, 1, 2}},
		{"other window", func() [][]byte {
			ps := run(4)
			ps[2][20+15]++ // the kernel's GRO compares the flags' word, window included
			ps[3][20+15]++
			return ps
		}, false, []int{0, 2}},
		{"AE (reserved) bit", func() [][]byte {
			ps := run(3)
			ps[1][20+12] |= 1
			return ps
		}, false, []int{0, 1, 2}},
		{"bad IPv4 header checksum", func() [][]byte {
			ps := run(4)
			for _, p := range ps {
				packet.IPv4(p).SetChecksum()
			}
			ps[2][10]++
			return ps
		}, false, []int{0, 2, 3}},
		{"FIN", func() [][]byte {
			ps := run(3)
			ps[1][20+13] |= tcpFIN
			return ps
		}, false, []int{0, 1, 2}},
		{"SYN first", func() [][]byte {
			ps := run(3)
			ps[0][20+13] |= tcpSYN
			return ps
		}, false, []int{0, 1}},
		{"shorter ends it", func() [][]byte {
			ps := run(2)
			ps = append(ps, tcp4(1+2*seg, tcpACK, 500), tcp4(1+2*seg+500, tcpACK, seg))
			return ps
		}, false, []int{0, 3}},
		{"longer does not join", func() [][]byte {
			ps := [][]byte{tcp4(1, tcpACK, 500), tcp4(501, tcpACK, seg)}
			return ps
		}, false, []int{0, 1}},
		{"pure ACKs alone", func() [][]byte {
			return [][]byte{tcp4(1, tcpACK, 0), tcp4(1, tcpACK, 0)}
		}, false, []int{0, 1}},
		{"UDP with USO", func() [][]byte { return [][]byte{udp6(seg), udp6(seg), udp6(10)} }, true, []int{0}},
		{"UDP without USO", func() [][]byte { return [][]byte{udp6(seg), udp6(seg)} }, false, []int{0, 1}},
		{"UDP other flow label", func() [][]byte {
			ps := [][]byte{udp6(seg), udp6(seg)}
			ps[1][3] = 9
			return ps
		}, true, []int{0, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := &Queue{uso: c.uso, wpkts: c.pkts()}
			for _, p := range q.wpkts {
				// An IPv4 header checksum left 0 is set.
				if packet.IPVersion(p) == 4 && p[10]|p[11] == 0 {
					packet.IPv4(p).SetChecksum()
				}
			}
			var starts []int
			for i := 0; i < len(q.wpkts); i = q.runEnd(i) {
				starts = append(starts, i)
			}
			if len(starts) != len(c.starts) {
				t.Fatalf("writes start at %v, want %v", starts, c.starts)
			}
			for i := range starts {
				if starts[i] != c.starts[i] {
					t.Fatalf("writes start at %v, want %v", starts, c.starts)
				}
			}
		})
	}
	// At most maxSegments per super-packet.
	q := &Queue{wpkts: run(maxSegments + 3)}
	for _, p := range q.wpkts {
		packet.IPv4(p).SetChecksum()
	}
	if j := q.runEnd(0); j != maxSegments {
		t.Errorf("a run of %d ends at %d, want %d", maxSegments+3, j, maxSegments)
	}
}

// parseSuper takes a super-packet whose only segment is shorter than the
// segment size, as wireguard-go's split did (and the old check refused),
// and refuses headers that do not fit the first buffer.
func TestParseSuper(t *testing.T) {
	p := tcp4(1, tcpACK, 300)
	h := virtioHdr{flags: flagNeedsCsum, gsoType: gsoTCPv4, gsoSize: 1000, csumStart: 20, csumOffset: 16}
	var sp superPacket
	if !parseSuper(&h, p, nil, len(p), &sp) || sp.segs != 1 || sp.hl != 52 || sp.segLen(0) != 300 {
		t.Errorf("short super-packet: %d segments, headers %d, segment %d", sp.segs, sp.hl, sp.segLen(0))
	}
	if parseSuper(&h, p[:40], nil, len(p), &sp) {
		t.Error("accepted headers beyond the first buffer")
	}
	h.gsoType = gsoTCPv6
	if parseSuper(&h, p, nil, len(p), &sp) {
		t.Error("accepted TCPv6 GSO for an IPv4 packet")
	}
}
