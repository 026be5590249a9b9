package gateway

import (
	"slices"
	"testing"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/sad"
)

// TestTunnelStatsAcrossRekey: a tunnel's counters are one series per
// direction whose value never goes backwards while rekeys replace its SAs,
// retire them (their final counts kept) and the child goes down; every
// drop reason is there from the first read.
func TestTunnelStatsAcrossRekey(t *testing.T) {
	b := newHoldBed(t)
	// No data plane holds retired SAs: they end at once, so their counts
	// move into the totals as soon as the store lets them go.
	b.g.store = sad.NewStore(func(_ uint64, sas []*sad.SA) {
		for _, s := range sas {
			s.End()
		}
	})
	t.Cleanup(b.g.store.Close)

	// traffic counts packets on the tunnel's current SAs as the data plane
	// would: n sealed, n opened by the newest inbound SA, one replay.
	traffic := func(n uint64) {
		tn := b.g.store.Load().Tunnel("net")
		out := tn.Out().SA
		out.Counters.Packets.Add(n)
		out.Counters.Bytes.Add(100 * n)
		ins := tn.Inbound()
		in := ins[len(ins)-1].SA
		in.Counters.Packets.Add(n)
		in.Counters.Bytes.Add(100 * n)
		in.Counters.Drops[esp.ReasonReplay].Add(1)
	}
	var last []TunnelStats
	read := func(what string, wantOut, wantIn uint64) {
		t.Helper()
		st := b.g.TunnelStats()
		if len(st) != 2 || st[0].Tunnel != "net" || st[0].Direction != "in" || st[1].Tunnel != "net" || st[1].Direction != "out" {
			t.Fatalf("%s: series %+v, want net in and net out only", what, st)
		}
		if st[1].Packets != wantOut || st[0].Packets != wantIn {
			t.Fatalf("%s: out %d in %d packets, want %d and %d", what, st[1].Packets, st[0].Packets, wantOut, wantIn)
		}
		for i, s := range st {
			for _, r := range DropReasons(s.Direction) {
				if _, ok := s.Drops[r]; !ok {
					t.Errorf("%s: %s lacks drop reason %q", what, s.Direction, r)
				}
			}
			if last != nil {
				p := last[i]
				if s.Packets < p.Packets || s.Bytes < p.Bytes || s.Drops["replay"] < p.Drops["replay"] {
					t.Fatalf("%s: %s went backwards: %+v after %+v", what, s.Direction, s, p)
				}
			}
		}
		last = slices.Clone(st)
	}

	first := b.pair(false)
	b.up(first)
	read("installed", 0, 0)
	traffic(5)
	read("first pair", 5, 5)

	// A rekey: the old outbound SA retires (and ends) at the switch.
	traffic(2)
	second := b.pair(false)
	b.up(second)
	read("rekeyed", 7, 7)
	traffic(4)
	read("on the second pair", 11, 11)
	b.down(first)
	read("the first pair deleted", 11, 11)

	// An SA no read has seen, ended: its counts are not lost.
	third := b.pair(false)
	b.up(third)
	traffic(3)
	fourth := b.pair(false)
	b.up(fourth)
	b.down(second)
	b.down(third)
	read("two rekeys between reads", 14, 14)

	// The child goes down: its tunnel keeps its series and counts.
	b.down(fourth)
	read("down", 14, 14)
	if last[0].Drops["replay"] != 4 {
		t.Errorf("replay drops %d, want 4 (one per traffic)", last[0].Drops["replay"])
	}
}
