package esp_test

import (
	"net/netip"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/esp"
)

// TestSetOuter: an outbound tunnel SA moved to new outer addresses and
// ports (MOBIKE) seals with them, IPv4 and IPv6 (its UDP checksum
// follows), the inbound SA still opens what it seals, and the sequence
// numbers go on; a move to the other family, or of an inbound SA, is
// refused. Config keeps the first addresses; Outer tells the current.
func TestSetOuter(t *testing.T) {
	for _, outer6 := range []bool{false, true} {
		h := newHarness(t)
		out, in := saPair(t, pairOpts{alg: cryptodev.AES128GCM16, encap: esp.EncapUDP, outer6: outer6})
		inner := ipPacket(false, 40)
		if _, r := h.seal(out, inner); r != esp.ReasonNone {
			t.Fatal(r)
		}
		src, dst := netip.MustParseAddrPort("198.51.100.1:4500"), netip.MustParseAddrPort("203.0.113.7:61234")
		other := netip.MustParseAddrPort("[2001:db8::7]:4500")
		if outer6 {
			src, dst, other = netip.MustParseAddrPort("[2001:db8:1::1]:4500"), netip.MustParseAddrPort("[2001:db8:2::7]:61234"), netip.MustParseAddrPort("192.0.2.7:4500")
		}
		if err := out.SetOuter(src, other); err == nil {
			t.Errorf("outer6 %v: moved to another family", outer6)
		}
		if err := in.SetOuter(src, dst); err == nil {
			t.Errorf("outer6 %v: moved an inbound SA", outer6)
		}
		if err := out.SetOuter(src, dst); err != nil {
			t.Fatal(err)
		}
		ct, r := h.seal(out, inner)
		if r != esp.ReasonNone {
			t.Fatal(r)
		}
		checkOuter(t, ct, esp.Tunnel, esp.EncapUDP, outer6, inner)
		var pp esp.Parsed
		if r := esp.Parse(ct, []uint16{4500}, &pp); r != esp.ReasonNone {
			t.Fatal(r)
		}
		if pp.Src != src.Addr() || pp.Dst != dst.Addr() || pp.SPort != src.Port() || pp.DPort != dst.Port() {
			t.Errorf("outer6 %v: sealed %v:%d -> %v:%d, want %v -> %v", outer6, pp.Src, pp.SPort, pp.Dst, pp.DPort, src, dst)
		}
		if pt, r := h.open(in, ct); r != esp.ReasonNone || string(pt) != string(inner) {
			t.Errorf("outer6 %v: opening the moved SA's packet: %v", outer6, r)
		}
		if out.Seq() != 2 {
			t.Errorf("outer6 %v: seq %d after two packets", outer6, out.Seq())
		}
		if s, d := out.Outer(); s != src || d != dst {
			t.Errorf("Outer %v %v", s, d)
		}
		if c := out.Config(); c.Dst == dst.Addr() {
			t.Errorf("Config changed: %v", c.Dst)
		}
	}
}
