package spd_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/spd"
)

func TestRangePrefixes(t *testing.T) {
	cases := []struct {
		start, end string
		want       []string
	}{
		{"10.1.0.0", "10.1.0.255", []string{"10.1.0.0/24"}},
		{"10.1.0.1", "10.1.0.6", []string{"10.1.0.1/32", "10.1.0.2/31", "10.1.0.4/31", "10.1.0.6/32"}},
		{"0.0.0.0", "255.255.255.255", []string{"0.0.0.0/0"}},
		{"::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", []string{"::/0"}},
		{"fd00::ff", "fd00::100", []string{"fd00::ff/128", "fd00::100/128"}},
		{"10.0.0.2", "10.0.0.1", nil},
	}
	for _, c := range cases {
		r := spd.Range{Start: netip.MustParseAddr(c.start), End: netip.MustParseAddr(c.end)}
		var got []string
		for _, p := range r.Prefixes() {
			got = append(got, p.String())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s-%s: %v, want %v", c.start, c.end, got, c.want)
		}
	}
}

func tsKey(src, dst string, proto uint8, sport, dport uint16) *spd.FlowKey {
	return &spd.FlowKey{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: proto, SPort: sport, DPort: dport}
}

// TestSATS: a packet is inside an SA's selectors when its peer-side
// address, protocol and port fall in one of Remote and its own-side ones
// in one of Local; the other family, another protocol or a port outside
// the range are not.
func TestSATS(t *testing.T) {
	ts := spd.NewSATS(
		[]spd.Range{spd.RangeOf(netip.MustParsePrefix("10.1.0.0/24"))},
		[]spd.Range{spd.RangeOf(netip.MustParsePrefix("10.2.0.0/25")),
			{Start: netip.MustParseAddr("10.2.0.128"), End: netip.MustParseAddr("10.2.0.255"), Proto: 1},
			{Start: netip.MustParseAddr("10.9.0.1"), End: netip.MustParseAddr("10.9.0.1"), Proto: 6, Ports: spd.PortRange{Lo: 443, Hi: 443}}},
	)
	in := []struct {
		k    *spd.FlowKey
		want bool
	}{
		{tsKey("10.2.0.5", "10.1.0.1", 17, 53, 1000), true},
		{tsKey("10.2.0.200", "10.1.0.1", 1, 0, 0), true},
		{tsKey("10.2.0.200", "10.1.0.1", 17, 53, 1000), false}, // ICMP only
		{tsKey("10.3.0.5", "10.1.0.1", 17, 53, 1000), false},   // another subnet
		{tsKey("10.1.0.77", "10.1.0.1", 17, 53, 1000), false},  // our own
		{tsKey("10.2.0.5", "10.5.0.1", 17, 53, 1000), false},   // to outside our side
		{tsKey("10.9.0.1", "10.1.0.1", 6, 443, 5555), true},
		{tsKey("10.9.0.1", "10.1.0.1", 6, 80, 5555), false},
		{tsKey("fd00:2::5", "fd00:1::1", 17, 53, 1000), false}, // no IPv6 selector
		{&spd.FlowKey{}, false},
	}
	for _, c := range in {
		if got := ts.Inbound(c.k); got != c.want {
			t.Errorf("Inbound(%+v) = %v, want %v", *c.k, got, c.want)
		}
		// The same flow the other way is outbound.
		out := &spd.FlowKey{Src: c.k.Dst, Dst: c.k.Src, Proto: c.k.Proto, SPort: c.k.DPort, DPort: c.k.SPort}
		if got := ts.Outbound(out); got != c.want {
			t.Errorf("Outbound(%+v) = %v, want %v", *out, got, c.want)
		}
	}
	if ts.Routed() {
		t.Error("selectors with a protocol and a restricted local side are Routed")
	}
	anyLocal := spd.NewSATS(spd.AnyAddress, []spd.Range{spd.RangeOf(netip.MustParsePrefix("fd00:2::/64"))})
	if !anyLocal.Inbound(tsKey("fd00:2::5", "2001:db8::1", 58, 0, 0)) || anyLocal.Inbound(tsKey("fd00:3::5", "2001:db8::1", 58, 0, 0)) ||
		!anyLocal.Outbound(tsKey("fd00:1::1", "fd00:2::5", 6, 1, 2)) || !anyLocal.Routed() {
		t.Error("a static tunnel's selectors")
	}
	k := tsKey("10.2.0.5", "10.1.0.1", 17, 53, 1000)
	if n := testing.AllocsPerRun(100, func() { ts.Inbound(k) }); n != 0 {
		t.Errorf("Inbound allocates %v times", n)
	}
}

// BenchmarkSATSInbound is the per-packet cost of the data plane's inbound
// selector check: reading the flow key of a 64-byte IPv4 UDP packet and
// matching it, against a static tunnel's selectors (one remote prefix,
// any local address) and against negotiated ones (a few ranges each
// side, the match in the last).
func BenchmarkSATSInbound(b *testing.B) {
	pkt := make([]byte, 64)
	packet.IPv4(pkt).Encode(&packet.IPv4Fields{Length: 64, TTL: 64, Protocol: packet.ProtoUDP,
		Src: [4]byte{10, 2, 0, 5}, Dst: [4]byte{10, 1, 0, 7}})
	packet.UDP(pkt[20:]).Encode(1000, 2000, 44)
	ranges := func(ps ...string) []spd.Range {
		var out []spd.Range
		for _, p := range ps {
			out = append(out, spd.RangeOf(netip.MustParsePrefix(p)))
		}
		return out
	}
	for _, c := range []struct {
		name string
		ts   *spd.SATS
	}{
		{"static", spd.NewSATS(spd.AnyAddress, ranges("10.2.0.0/24"))},
		{"negotiated", spd.NewSATS(ranges("fd00:1::/64", "10.9.0.0/16", "10.1.0.0/24"), ranges("fd00:2::/64", "10.8.0.0/16", "10.2.0.0/24"))},
	} {
		b.Run(c.name, func(b *testing.B) {
			var k spd.FlowKey
			b.ReportAllocs()
			for b.Loop() {
				if !spd.ExtractFlowKey(pkt, &k) || !c.ts.Inbound(&k) {
					b.Fatal("no match")
				}
			}
		})
	}
}
