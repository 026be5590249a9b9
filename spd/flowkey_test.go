package spd_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/spd"
)

var (
	src4, dst4 = addr("192.0.2.1"), addr("198.51.100.2")
	src6, dst6 = addr("2001:db8::1"), addr("2001:db8:ffff::2")
)

func tcpHdr(sport, dport uint16) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	b[12] = 5 << 4
	return b
}

func udpHdr(sport, dport uint16) []byte {
	b := make([]byte, 8)
	packet.UDP(b).Encode(sport, dport, 8)
	return b
}

func icmpHdr(typ, code uint8) []byte { return []byte{typ, code, 0, 0, 0, 1, 0, 1} }

// v4pkt builds an IPv4 packet around l4. fragOff is in 8-byte units; opts
// adds 4 bytes of options (IHL 6).
func v4pkt(proto uint8, l4 []byte, fragOff uint16, more bool, opts ...bool) []byte {
	hl := 20
	if len(opts) > 0 && opts[0] {
		hl = 24
	}
	b := make([]byte, hl+len(l4))
	packet.IPv4(b).Encode(&packet.IPv4Fields{Length: uint16(len(b)), TTL: 64, Protocol: proto, Src: src4.As4(), Dst: dst4.As4()})
	b[0] = 0x40 | byte(hl/4)
	f := fragOff
	if more {
		f |= 0x2000
	}
	binary.BigEndian.PutUint16(b[6:], f)
	copy(b[hl:], l4)
	return b
}

// ext is an IPv6 extension header: typ, its length in 8-octet units past the
// first 8 (n8), and for fragment headers the offset and M flag.
type ext struct {
	typ     uint8
	n8      int
	fragOff uint16
	more    bool
}

func v6pkt(exts []ext, proto uint8, l4 []byte) []byte {
	var pay []byte
	first := proto
	for i, e := range exts {
		if i == 0 {
			first = e.typ
		}
		next := proto
		if i+1 < len(exts) {
			next = exts[i+1].typ
		}
		h := make([]byte, (e.n8+1)*8)
		h[0] = next
		if e.typ == 44 {
			h = h[:8]
			f := e.fragOff << 3
			if e.more {
				f |= 1
			}
			binary.BigEndian.PutUint16(h[2:], f)
			binary.BigEndian.PutUint32(h[4:], 0xabcd)
		} else {
			h[1] = byte(e.n8)
			h[2] = 1 // a PadN option, for realism
			h[3] = byte(len(h) - 4)
		}
		pay = append(pay, h...)
	}
	pay = append(pay, l4...)
	b := make([]byte, 40+len(pay))
	packet.IPv6(b).Encode(&packet.IPv6Fields{PayloadLength: uint16(len(pay)), NextHeader: first, HopLimit: 64, Src: src6.As16(), Dst: dst6.As16()})
	copy(b[40:], pay)
	return b
}

type flowCase struct {
	name string
	pkt  []byte
	ok   bool
	want spd.FlowKey
}

func flowCases() []flowCase {
	k4 := func(proto uint8, sport, dport uint16) spd.FlowKey {
		return spd.FlowKey{Src: src4, Dst: dst4, Proto: proto, SPort: sport, DPort: dport}
	}
	k6 := func(proto uint8, sport, dport uint16) spd.FlowKey {
		return spd.FlowKey{Src: src6, Dst: dst6, Proto: proto, SPort: sport, DPort: dport}
	}
	padded := append(v4pkt(17, udpHdr(1, 2), 0, false), 0, 0, 0, 0)
	v6short := v6pkt(nil, 17, udpHdr(7, 8))
	binary.BigEndian.PutUint16(v6short[4:], 3) // payload length cuts the UDP header
	v4short := v4pkt(6, tcpHdr(7, 8), 0, false)
	binary.BigEndian.PutUint16(v4short[2:], 23) // total length cuts the ports
	extPastEnd := v6pkt([]ext{{typ: 60, n8: 1}}, 17, udpHdr(1, 2))
	extPastEnd[41] = 3 // dest opts claims 32 bytes, 24 are there
	return []flowCase{
		{"v4 tcp", v4pkt(6, tcpHdr(40000, 443), 0, false), true, k4(6, 40000, 443)},
		{"v4 udp", v4pkt(17, udpHdr(500, 4500), 0, false), true, k4(17, 500, 4500)},
		{"v4 sctp", v4pkt(132, tcpHdr(9, 10)[:12], 0, false), true, k4(132, 9, 10)},
		{"v4 icmp", v4pkt(1, icmpHdr(8, 0), 0, false), true, k4(1, 0, 0)},
		{"v4 esp", v4pkt(50, make([]byte, 24), 0, false), true, k4(50, 0, 0)},
		{"v4 options", v4pkt(6, tcpHdr(1, 2), 0, false, true), true, k4(6, 1, 2)},
		{"v4 padding past total length", padded, true, k4(17, 1, 2)},
		{"v4 first fragment", v4pkt(17, udpHdr(3, 4), 0, true), true, k4(17, 3, 4)},
		{"v4 non-first fragment", v4pkt(17, udpHdr(3, 4), 185, true), true, k4(17, 0, 0)},
		{"v4 last fragment", v4pkt(6, tcpHdr(3, 4), 1, false), true, k4(6, 0, 0)},
		{"v4 tiny first fragment", v4pkt(6, []byte{1, 2}, 0, true), false, spd.FlowKey{}},
		{"v4 ports cut by total length", v4short, false, spd.FlowKey{}},
		{"v4 udp no header", v4pkt(17, nil, 0, false), false, spd.FlowKey{}},
		{"v4 icmp no header", v4pkt(1, nil, 0, false), true, k4(1, 0, 0)},
		{"v4 ihl 4", func() []byte { b := v4pkt(6, tcpHdr(1, 2), 0, false); b[0] = 0x44; return b }(), false, spd.FlowKey{}},
		{"v4 ihl past total", func() []byte { b := v4pkt(6, nil, 0, false); b[0] = 0x4f; return b }(), false, spd.FlowKey{}},

		{"v6 udp", v6pkt(nil, 17, udpHdr(5000, 53)), true, k6(17, 5000, 53)},
		{"v6 tcp", v6pkt(nil, 6, tcpHdr(1, 22)), true, k6(6, 1, 22)},
		{"v6 icmpv6", v6pkt(nil, 58, icmpHdr(128, 0)), true, k6(58, 0, 0)},
		{"v6 no next", v6pkt(nil, 59, nil), true, k6(59, 0, 0)},
		{"v6 esp", v6pkt(nil, 50, make([]byte, 16)), true, k6(50, 0, 0)},
		{"v6 hbh", v6pkt([]ext{{typ: 0}}, 6, tcpHdr(1, 2)), true, k6(6, 1, 2)},
		{"v6 all extensions", v6pkt([]ext{{typ: 0, n8: 1}, {typ: 60}, {typ: 43, n8: 2}, {typ: 44, more: true}, {typ: 60, n8: 3}}, 6, tcpHdr(1234, 80)), true, k6(6, 1234, 80)},
		{"v6 atomic fragment", v6pkt([]ext{{typ: 44}}, 17, udpHdr(1, 2)), true, k6(17, 1, 2)},
		{"v6 non-first fragment", v6pkt([]ext{{typ: 0}, {typ: 44, fragOff: 181, more: true}}, 17, make([]byte, 64)), true, k6(17, 0, 0)},
		{"v6 non-first fragment behind dest opts", v6pkt([]ext{{typ: 44, fragOff: 1}, {typ: 60}}, 6, make([]byte, 16)), true, k6(60, 0, 0)},
		{"v6 first fragment without ports", v6pkt([]ext{{typ: 44, more: true}}, 17, []byte{1, 2}), false, spd.FlowKey{}},
		{"v6 icmpv6 behind fragment", v6pkt([]ext{{typ: 44, more: true}}, 58, icmpHdr(1, 4)), true, k6(58, 0, 0)},
		{"v6 extension past payload", extPastEnd, false, spd.FlowKey{}},
		{"v6 payload length cuts ports", v6short, false, spd.FlowKey{}},
		{"v6 short fixed header", v6pkt(nil, 17, udpHdr(1, 2))[:39], false, spd.FlowKey{}},
		{"v6 payload length past end", v6pkt(nil, 17, udpHdr(1, 2))[:47], false, spd.FlowKey{}},
		{"v6 extension only", v6pkt([]ext{{typ: 60}}, 17, nil)[:44], false, spd.FlowKey{}},

		{"empty", nil, false, spd.FlowKey{}},
		{"version 0", make([]byte, 60), false, spd.FlowKey{}},
		{"version 5", append([]byte{0x50}, make([]byte, 59)...), false, spd.FlowKey{}},
	}
}

func TestExtractFlowKey(t *testing.T) {
	for _, c := range flowCases() {
		k := spd.FlowKey{Src: addr("10.9.9.9"), SPort: 99} // must be overwritten
		ok := spd.ExtractFlowKey(c.pkt, &k)
		if ok != c.ok || k != c.want {
			t.Errorf("%s: ExtractFlowKey = %v, %+v; want %v, %+v", c.name, ok, k, c.ok, c.want)
		}
	}
}

// TestExtractFlowKeyTruncated cuts every well-formed packet at every length:
// since IPv4 total length and IPv6 payload length then exceed the bytes
// there, every cut must be rejected, without a panic.
func TestExtractFlowKeyTruncated(t *testing.T) {
	for _, c := range flowCases() {
		if !c.ok {
			continue
		}
		n := len(c.pkt)
		if v := packet.IPVersion(c.pkt); v == 4 {
			n = int(packet.IPv4(c.pkt).TotalLength())
		}
		for i := range n {
			var k spd.FlowKey
			if spd.ExtractFlowKey(c.pkt[:i], &k) || k != (spd.FlowKey{}) {
				t.Errorf("%s cut to %d of %d bytes: accepted as %+v", c.name, i, n, k)
			}
		}
	}
}

func TestExtractFlowKeyAllocs(t *testing.T) {
	pkts := [][]byte{v4pkt(6, tcpHdr(1, 2), 0, false), v6pkt([]ext{{typ: 0}, {typ: 44}}, 17, udpHdr(3, 4))}
	var k spd.FlowKey
	if n := testing.AllocsPerRun(100, func() {
		for _, p := range pkts {
			spd.ExtractFlowKey(p, &k)
		}
	}); n != 0 {
		t.Errorf("ExtractFlowKey allocates %v times per call", n)
	}
}

// TestExtractThenLookup runs parsed packets through an SPD: a non-first
// fragment reaches only the policy with ANY ports.
func TestExtractThenLookup(t *testing.T) {
	db, err := spd.New([]spd.Policy{
		{Name: "dns", Sel: spd.Selector{Dst: netip.PrefixFrom(dst4, 32), Proto: 17, DPort: spd.PortRange{53, 53}}, Action: spd.Protect, Target: "dns-sa"},
		{Name: "udp", Sel: spd.Selector{Dst: netip.PrefixFrom(dst4, 32), Proto: 17}, Action: spd.Discard},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pkt  []byte
		want string
	}{
		{v4pkt(17, udpHdr(1000, 53), 0, true), "dns"},
		{v4pkt(17, udpHdr(1000, 53), 10, false), "udp"},
		{v4pkt(17, udpHdr(1000, 54), 0, false), "udp"},
	} {
		var k spd.FlowKey
		if !spd.ExtractFlowKey(c.pkt, &k) {
			t.Fatal("not parsed")
		}
		if p := db.Lookup(&k); p == nil || p.Name != c.want {
			t.Errorf("%+v matched %v, want %s", k, p, c.want)
		}
	}
}
