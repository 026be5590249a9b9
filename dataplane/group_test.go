package dataplane

import (
	"testing"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/sad"
)

// TestGroupBySA: a batch whose SAs are interleaved leaves the grouper in
// one run per SA, in the order of each SA's first packet, each SA's
// packets (and what goes with them: the SAD entry, the parsed header) in
// their order; a batch already in runs is not touched; and grouping
// allocates nothing (DESIGN.md decision 10).
func TestGroupBySA(t *testing.T) {
	sas := []*esp.SA{new(esp.SA), new(esp.SA), new(esp.SA)}
	ents := []*sad.SA{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	pool := packet.NewPool(16, 256, 0)
	const n = 9
	of := []int{0, 1, 0, 2, 1, 0, 2, 2, 1} // SA of packet i
	bufs := make([]*packet.Buf, n)
	pool.GetN(bufs)
	b := &batch{Batch: esp.NewBatch(n), sas: make([]*sad.SA, 0, n)}
	fill := func(of []int) {
		b.Reset(esp.Inbound, len(of))
		b.sas = b.sas[:len(of)]
		for i, k := range of {
			b.Bufs[i], b.SAs[i], b.sas[i] = bufs[i], sas[k], ents[k]
			b.Parsed[i] = esp.Parsed{SPI: uint32(i)} // the packet's own
		}
	}
	g := newGrouper(n)
	fill(of)
	g.group(b)
	want := []int{0, 2, 5, 1, 4, 8, 3, 6, 7} // packet indexes: a's, b's, c's
	for j, i := range want {
		if b.Bufs[j] != bufs[i] || b.SAs[j] != sas[of[i]] || b.sas[j] != ents[of[i]] || b.Parsed[j].SPI != uint32(i) {
			got := make([]uint32, n)
			for k := range n {
				got[k] = b.Parsed[k].SPI
			}
			t.Fatalf("after grouping, packets in order %v, want %v (each with its SA, entry and header)", got, want)
		}
	}
	// Already in runs: nothing moves.
	runs := []int{2, 2, 0, 1, 1}
	fill(runs)
	g.group(b)
	for i := range runs {
		if b.Parsed[i].SPI != uint32(i) {
			t.Fatalf("a batch in runs was reordered: position %d holds packet %d", i, b.Parsed[i].SPI)
		}
	}
	if a := testing.AllocsPerRun(100, func() { fill(of); g.group(b) }); a != 0 {
		t.Errorf("grouping allocates %v times per batch, want 0", a)
	}
}
