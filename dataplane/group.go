package dataplane

// Grouping by SA: a lane's batch holds its read's packets in arrival
// order, and with many tunnels neighbours belong to different SAs, so
// esp.Pipeline, which takes an SA's lock (and checks its reservation) once
// per run of consecutive packets of the SA, would take one per packet.
// Before a batch is submitted its packets are put in runs, one per SA:
// each SA's packets keep their order, and the SAs come in the order of
// their first packet. Packets of different SAs may so leave in another
// order than they came (they belong to different tunnels, or different
// SAs of one tunnel, whose order nothing promises); a flow's packets,
// which share an SA, never do.

import (
	"unsafe"

	"github.com/sluicegw/sluice/esp"
	"github.com/sluicegw/sluice/packet"
	"github.com/sluicegw/sluice/sad"
)

// grouper puts a batch's packets in runs by SA. It keeps its memory
// between batches and allocates nothing per batch. One lane owns it.
type grouper struct {
	bits  uint          // log2 of len(keys)
	keys  []*esp.SA     // open-addressing table: SA -> group
	ids   []int32       // group of keys[i]
	used  []int32       // slots of keys in use, to clear
	gid   []int32       // group of each packet
	off   []int32       // per group: its count, then where its next packet goes
	bufs  []*packet.Buf // scratch copies, to permute from
	sas   []*esp.SA     //
	dsas  []*sad.SA     //
	parse []esp.Parsed  //
	why   []esp.Reason  //
}

// newGrouper makes a grouper for batches of up to n packets.
func newGrouper(n int) *grouper {
	bits := uint(1)
	for 1<<bits < 2*n {
		bits++
	}
	return &grouper{bits: bits, keys: make([]*esp.SA, 1<<bits), ids: make([]int32, 1<<bits),
		used: make([]int32, 0, n), gid: make([]int32, n), off: make([]int32, n),
		bufs: make([]*packet.Buf, n), sas: make([]*esp.SA, n), dsas: make([]*sad.SA, n),
		parse: make([]esp.Parsed, n), why: make([]esp.Reason, n)}
}

// slot is where sa's search in the table starts.
func (g *grouper) slot(sa *esp.SA) int {
	return int((uint64(uintptr(unsafe.Pointer(sa))) >> 4) * 0x9e3779b97f4a7c15 >> (64 - g.bits))
}

// group puts b's packets in runs by SA, stable within each SA. A batch
// whose SAs already come in one run each is left as it is.
func (g *grouper) group(b *batch) {
	n := len(b.Bufs)
	if n < 3 || n > len(g.gid) {
		return
	}
	runs := 1
	for i := 1; i < n; i++ {
		if b.SAs[i] != b.SAs[i-1] {
			runs++
		}
	}
	if runs == 1 {
		return
	}
	mask := len(g.keys) - 1
	groups := int32(0)
	for i, sa := range b.SAs[:n] {
		h := g.slot(sa)
		for g.keys[h] != nil && g.keys[h] != sa {
			h = (h + 1) & mask
		}
		if g.keys[h] == nil {
			g.keys[h], g.ids[h] = sa, groups
			g.used = append(g.used, int32(h))
			g.off[groups] = 0
			groups++
		}
		g.gid[i] = g.ids[h]
		g.off[g.ids[h]]++
	}
	for _, h := range g.used {
		g.keys[h] = nil
	}
	g.used = g.used[:0]
	if int(groups) == runs {
		return // every SA is in one run already
	}
	at := int32(0)
	for k := range groups {
		c := g.off[k]
		g.off[k] = at
		at += c
	}
	copy(g.bufs, b.Bufs[:n])
	copy(g.sas, b.SAs[:n])
	copy(g.dsas, b.sas[:n])
	copy(g.why, b.Reasons[:n])
	inbound := b.Dir == esp.Inbound
	if inbound {
		copy(g.parse, b.Parsed[:n])
	}
	for i := range n {
		k := g.gid[i]
		j := g.off[k]
		g.off[k]++
		b.Bufs[j], b.SAs[j], b.sas[j], b.Reasons[j] = g.bufs[i], g.sas[i], g.dsas[i], g.why[i]
		if inbound {
			b.Parsed[j] = g.parse[i]
		}
	}
	clear(g.bufs[:n])
	clear(g.sas[:n])
	clear(g.dsas[:n])
}
