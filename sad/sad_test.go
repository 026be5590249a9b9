package sad

import (
	"net/netip"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/cryptodev/soft"
	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/spd"
)

func testSA(t *testing.T, spi uint32, out bool) *SA {
	t.Helper()
	key, err := soft.New().NewKey(cryptodev.AES128GCM16, make([]byte, 20), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := esp.Config{SPI: spi, Alg: cryptodev.AES128GCM16, Key: key, ReplayWindow: 64,
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")}
	var rt *esp.SA
	if out {
		rt, err = esp.NewOutbound(cfg)
	} else {
		rt, err = esp.NewInbound(cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &SA{SA: rt, Key: key}
}

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

func TestRoutesAndLookups(t *testing.T) {
	var retired []*SA
	s := NewStore(func(_ uint64, sas []*SA) { retired = append(retired, sas...) })
	t1, err := s.AddTunnel(TunnelSpec{Name: "a", Remote: prefixes("10.2.0.0/16", "2001:db8:2::/48"), Out: testSA(t, 0x100, true), In: []*SA{testSA(t, 0x200, false)}})
	if err != nil {
		t.Fatal(err)
	}
	t2, err := s.AddTunnel(TunnelSpec{Name: "b", Remote: prefixes("10.3.0.0/24", "10.4.1.0/24"), Out: testSA(t, 0x101, true), In: []*SA{testSA(t, 0x201, false)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddTunnel(TunnelSpec{Name: "c", Remote: prefixes("10.2.5.0/24")}); err == nil {
		t.Fatal("overlapping prefix accepted")
	}
	if _, err := s.AddTunnel(TunnelSpec{Name: "d", In: []*SA{testSA(t, 0x200, false)}}); err == nil {
		t.Fatal("duplicate inbound SPI accepted")
	}
	db := s.Load()
	for dst, want := range map[string]*Tunnel{"10.2.9.9": t1, "10.3.0.1": t2, "10.4.1.255": t2, "10.4.2.1": nil, "2001:db8:2::5": t1, "2001:db8:3::5": nil, "10.1.0.1": nil} {
		if got := db.Route(netip.MustParseAddr(dst)); got != want {
			t.Errorf("route %s: got %v", dst, got)
		}
	}
	if in := db.Inbound(0x201); in == nil || in.Tunnel != t2 {
		t.Fatal("inbound lookup")
	}
	if db.Inbound(0x999) != nil {
		t.Fatal("unknown SPI found")
	}
	// Rekey steps.
	if err := s.AddInbound("b", testSA(t, 0x301, false)); err != nil {
		t.Fatal(err)
	}
	old := t2.Out()
	if err := s.SwitchOutbound("b", testSA(t, 0x102, true)); err != nil {
		t.Fatal(err)
	}
	if len(retired) != 1 || retired[0] != old || t2.Out().SA.SPI() != 0x102 {
		t.Fatal("outbound switch did not retire the old SA")
	}
	if err := s.RemoveInbound(0x201); err != nil {
		t.Fatal(err)
	}
	if s.Load().Inbound(0x201) != nil || db.Inbound(0x201) == nil {
		t.Fatal("removal must change the new snapshot only")
	}
	if s.Load().Generation() <= db.Generation() {
		t.Fatal("generation did not grow")
	}
	if err := s.RemoveTunnel("a"); err != nil {
		t.Fatal(err)
	}
	if s.Load().Route(netip.MustParseAddr("10.2.0.1")) != nil || len(retired) != 4 {
		t.Fatalf("tunnel removal: %d retired", len(retired))
	}
	for range MaxInbound {
		s.AddInbound("b", testSA(t, uint32(0x400+len(retired)), false))
		retired = append(retired, nil)
	}
	if err := s.AddInbound("b", testSA(t, 0x500, false)); err == nil {
		t.Fatal("a fifth inbound SA was accepted")
	}
}

// TestSelectorsInherited: an SA added to a tunnel without selectors of
// its own takes the tunnel's (a static tunnel's remote prefixes), on
// AddTunnel, AddInbound and SwitchOutbound; one with its own (a
// negotiated IKE pair's) keeps them.
func TestSelectorsInherited(t *testing.T) {
	s := NewStore(nil)
	defer s.Close()
	tts := spd.NewSATS(spd.AnyAddress, []spd.Range{spd.RangeOf(netip.MustParsePrefix("10.2.0.0/16"))})
	own := spd.NewSATS(nil, nil)
	out, in := testSA(t, 0x100, true), testSA(t, 0x200, false)
	in.TS = own
	if _, err := s.AddTunnel(TunnelSpec{Name: "a", Remote: prefixes("10.2.0.0/16"), TS: tts, Out: out, In: []*SA{in}}); err != nil {
		t.Fatal(err)
	}
	in2, out2 := testSA(t, 0x201, false), testSA(t, 0x101, true)
	if err := s.AddInbound("a", in2); err != nil {
		t.Fatal(err)
	}
	if err := s.SwitchOutbound("a", out2); err != nil {
		t.Fatal(err)
	}
	if out.TS != tts || in.TS != own || in2.TS != tts || out2.TS != tts || s.Load().Tunnel("a").TS != tts {
		t.Fatalf("selectors: out %p in %p in2 %p out2 %p, tunnel's %p, own %p", out.TS, in.TS, in2.TS, out2.TS, tts, own)
	}
}
