package spd

// The classifier finds the first matching policy with the bit-vector scheme
// of Lakshman and Stiliadis ("High-speed policy-based packet forwarding using
// efficient multi-dimensional range matching", SIGCOMM 1998):
//
//  1. Each selector field (source address, destination address, protocol,
//     source port, destination port) turns every policy into an inclusive
//     range of values: a prefix into its first and last address, ANY into
//     the whole space.
//  2. For one field, the ends of all those ranges cut the value space into
//     elementary intervals. Within one interval the set of policies whose
//     range covers the value does not change; that set is stored as a bit
//     vector with bit i for policy i.
//  3. A lookup finds, for each field, the interval holding the packet's value
//     (binary search over the interval starts; the protocol is a table of
//     256), ANDs the five vectors and returns the lowest set bit.
//
// Bit i is set in the AND exactly when policy i's range covers the packet's
// value in every field, that is when policy i matches; the lowest set bit is
// the lowest index that matches, which is what a linear first-match scan of
// the ordered SPD returns. Lookups cost five searches of O(log n) and n/64
// word ANDs, whatever the position of the matching policy.
//
// Memory: a field with n policies has at most 2n+1 intervals, each with an
// n-bit vector; identical vectors are stored once (ANY ports and protocols
// collapse to a handful). The worst case is 8n+260 vectors of n/8 bytes per
// address family: 2 MiB for both families at n = 1000, 33 MiB at
// MaxPolicies. The benchmark's SPD of 1000 policies takes 196 KiB.

import (
	"cmp"
	"encoding/binary"
	"math/bits"
	"net/netip"
	"slices"
)

// u128 is a point of a field's value space, big enough for IPv6 addresses;
// IPv4 addresses, protocols and ports use only lo.
type u128 struct{ hi, lo uint64 }

func (a u128) compare(b u128) int {
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

func (a u128) next() u128 {
	if a.lo == ^uint64(0) {
		return u128{a.hi + 1, 0}
	}
	return u128{a.hi, a.lo + 1}
}

// addrPoint maps an address to the value space of its family. (IPv4 goes
// through As4 rather than As16: reading back the [16]byte that As16 writes
// stalls on store forwarding, which costs a lookup about 10 ns per address.)
func addrPoint(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{0, uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// span is the inclusive range [lo, hi] of one policy in one field; a span
// that is not ok is empty (the policy matches no value of the field).
type span struct {
	lo, hi u128
	ok     bool
}

var (
	max4     = u128{0, 1<<32 - 1}
	max6     = u128{^uint64(0), ^uint64(0)}
	maxPort  = u128{0, 0xffff}
	maxProto = u128{0, 0xff}
)

// prefixSpan returns the addresses of a family covered by a selector prefix:
// all of them for the zero Prefix, none for a prefix of the other family.
func prefixSpan(p netip.Prefix, v6 bool) span {
	max := max4
	if v6 {
		max = max6
	}
	if !p.IsValid() {
		return span{hi: max, ok: true}
	}
	if p.Addr().Is6() != v6 {
		return span{}
	}
	lo := addrPoint(p.Masked().Addr())
	hi := lo
	if host := p.Addr().BitLen() - p.Bits(); host >= 64 {
		hi.lo = ^uint64(0)
		hi.hi |= 1<<(host-64) - 1
	} else {
		hi.lo |= 1<<host - 1
	}
	return span{lo, hi, true}
}

func portSpan(r PortRange) span {
	if r.IsAny() {
		return span{hi: maxPort, ok: true}
	}
	return span{u128{0, uint64(max(r.Lo, 1))}, u128{0, uint64(r.Hi)}, true}
}

func protoSpan(p uint8) span {
	if p == 0 {
		return span{hi: maxProto, ok: true}
	}
	return span{u128{0, uint64(p)}, u128{0, uint64(p)}, true}
}

// table classifies the keys of one address family. Each field maps a value
// to the offset of a bit vector of words uint64s in vecs.
type table struct {
	words    int
	vecs     []uint64
	src, dst addrField
	sport    portField
	dport    portField
	proto    [256]uint32
}

// addrField holds the intervals of an address field: starts4 in an IPv4
// table, starts6 in an IPv6 one.
type addrField struct {
	starts4 []uint32
	starts6 []u128
	vecs    []uint32
}

type portField struct {
	starts []uint16
	vecs   []uint32
}

// The searches below return the index of the interval holding x: that of
// the last start <= x (starts[0] is 0). Each step computes its outcome
// arithmetically instead of branching on it: the outcome is a coin toss that
// a branch predictor loses half the time, and the compiler does not turn
// this loop's branch into a conditional move.

func (f *addrField) find(x u128) uint32 {
	base, n := 0, len(f.starts4)
	if n > 0 {
		s, x := f.starts4, x.lo
		for n > 1 {
			half := n / 2
			gt := int((x - uint64(s[base+half])) >> 63) // 1 if s[base+half] > x
			base += half & (gt - 1)
			n -= half
		}
		return f.vecs[base]
	}
	s := f.starts6
	for n = len(s); n > 1; {
		half := n / 2
		y := s[base+half]
		_, b := bits.Sub64(x.lo, y.lo, 0)
		_, gt := bits.Sub64(x.hi, y.hi, b) // 1 if y > x
		base += half & (int(gt) - 1)
		n -= half
	}
	return f.vecs[base]
}

func (f *portField) find(x uint16) uint32 {
	s := f.starts
	base, n := 0, len(s)
	for n > 1 {
		half := n / 2
		gt := int((uint64(x) - uint64(s[base+half])) >> 63)
		base += half & (gt - 1)
		n -= half
	}
	return f.vecs[base]
}

// lookup returns the index of the first policy that matches, or -1.
func (t *table) lookup(src, dst u128, proto uint8, sport, dport uint16) int {
	w := t.words
	if w == 0 {
		return -1
	}
	v := t.vecs
	a := v[t.dst.find(dst):][:w]
	b := v[t.src.find(src):][:w]
	c := v[t.proto[proto]:][:w]
	d := v[t.sport.find(sport):][:w]
	e := v[t.dport.find(dport):][:w]
	for i, x := range a {
		if x &= b[i] & c[i] & d[i] & e[i]; x != 0 {
			return i*64 + bits.TrailingZeros64(x)
		}
	}
	return -1
}

// tableBuilder builds a table, storing each distinct vector once.
type tableBuilder struct {
	t    *table
	seen map[string]uint32
	cur  []uint64
	key  []byte
}

// buildTable builds the table of one family for ps, already validated.
func buildTable(ps []Policy, v6 bool) table {
	t := table{words: (len(ps) + 63) / 64}
	if t.words == 0 {
		return t
	}
	b := tableBuilder{t: &t, seen: map[string]uint32{}, cur: make([]uint64, t.words)}
	spans := make([]span, len(ps))
	field := func(f func(*Selector) span, max u128) ([]u128, []uint32) {
		for i := range ps {
			spans[i] = f(&ps[i].Sel)
		}
		return b.intervals(spans, max)
	}
	maxAddr := max4
	if v6 {
		maxAddr = max6
	}
	addr := func(f *addrField, p func(*Selector) netip.Prefix) {
		starts, vecs := field(func(s *Selector) span { return prefixSpan(p(s), v6) }, maxAddr)
		f.vecs = vecs
		if v6 {
			f.starts6 = starts
			return
		}
		for _, s := range starts {
			f.starts4 = append(f.starts4, uint32(s.lo))
		}
	}
	addr(&t.src, func(s *Selector) netip.Prefix { return s.Src })
	addr(&t.dst, func(s *Selector) netip.Prefix { return s.Dst })
	port := func(f *portField, r func(*Selector) PortRange) {
		starts, vecs := field(func(s *Selector) span { return portSpan(r(s)) }, maxPort)
		f.vecs = vecs
		for _, s := range starts {
			f.starts = append(f.starts, uint16(s.lo))
		}
	}
	port(&t.sport, func(s *Selector) PortRange { return s.SPort })
	port(&t.dport, func(s *Selector) PortRange { return s.DPort })
	starts, vecs := field(func(s *Selector) span { return protoSpan(s.Proto) }, maxProto)
	for i := range t.proto {
		j, _ := slices.BinarySearchFunc(starts, u128{0, uint64(i)}, u128.compare)
		if j == len(starts) || starts[j].lo != uint64(i) {
			j-- // i is inside interval j-1
		}
		t.proto[i] = vecs[j]
	}
	return t
}

// intervals cuts [0, max] into maximal intervals over which the set of spans
// covering a value is constant, and returns their starts with the offset of
// each one's vector.
func (b *tableBuilder) intervals(spans []span, max u128) (starts []u128, vecs []uint32) {
	type event struct {
		at  u128
		i   int
		add bool
	}
	var evs []event
	for i, s := range spans {
		if !s.ok {
			continue
		}
		evs = append(evs, event{s.lo, i, true})
		if s.hi != max {
			evs = append(evs, event{s.hi.next(), i, false})
		}
	}
	slices.SortFunc(evs, func(x, y event) int { return x.at.compare(y.at) })
	clear(b.cur)
	var at u128
	for j := 0; ; {
		for ; j < len(evs) && evs[j].at == at; j++ {
			bit := uint64(1) << (evs[j].i % 64)
			if evs[j].add {
				b.cur[evs[j].i/64] |= bit
			} else {
				b.cur[evs[j].i/64] &^= bit
			}
		}
		if off := b.intern(); len(vecs) == 0 || vecs[len(vecs)-1] != off {
			starts, vecs = append(starts, at), append(vecs, off)
		}
		if j == len(evs) {
			return starts, vecs
		}
		at = evs[j].at
	}
}

// intern returns the offset of a vector equal to b.cur, adding one if needed.
func (b *tableBuilder) intern() uint32 {
	b.key = b.key[:0]
	for _, w := range b.cur {
		b.key = binary.LittleEndian.AppendUint64(b.key, w)
	}
	if off, ok := b.seen[string(b.key)]; ok {
		return off
	}
	off := uint32(len(b.t.vecs))
	b.t.vecs = append(b.t.vecs, b.cur...)
	b.seen[string(b.key)] = off
	return off
}
