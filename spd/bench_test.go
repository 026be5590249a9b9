package spd_test

// Benchmarks of SPD lookups: the naive linear first-match scan (the
// reference), the classifier (DB.Lookup) and the per-worker flow cache in
// front of it, for SPDs of 1, 10, 100 and 1000 policies.
//
//	go test -run XXX -bench Lookup -benchtime 300ms ./spd/
//
// The SPD looks like a hub's: policy i protects traffic from a /16 of
// 10.0.0.0/8 to a /24, /25 or /26 of 172.16.0.0/12 (each in its own /24, in
// random order), for any protocol, TCP or UDP, some to a range of ports; one
// policy in eight is IPv6 instead, one in sixteen a bypass or discard.
// Workloads, each cycling through its flows:
//
//	last   16 flows that only the last policy matches (the worst case of a
//	       linear scan; a cache holds them all)
//	mix    1024 flows, each inside a random policy (which may not be the
//	       first to match it); one in ten matches no policy
//	churn  65536 such flows, more than a cache of 4096 entries holds: the
//	       cache's worst case, mostly misses
//
// The cache is DefaultCacheEntries, per benchmark, warm after the first pass.

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/sluicegw/sluice/spd"
)

func benchPolicies(n int) []spd.Policy {
	r := rand.New(rand.NewPCG(42, uint64(n)))
	slots := r.Perm(4096) // distinct destination /24s of 172.16.0.0/12 (first 16)
	ps := make([]spd.Policy, n)
	for i := range ps {
		var s spd.Selector
		slot := slots[i]
		if i%8 == 7 && i != n-1 {
			s.Src = netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(r.IntN(256))}), 40)
			s.Dst = netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb9, byte(slot >> 8), byte(slot)}), 48)
		} else {
			s.Src = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(r.IntN(256)), 0, 0}), 16)
			s.Dst = netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16 + byte(slot>>8), byte(slot), 0}), 24+r.IntN(3))
		}
		switch r.IntN(4) {
		case 1:
			s.Proto = 6
			if r.IntN(2) == 0 {
				lo := uint16(1 + r.IntN(10000))
				s.DPort = spd.PortRange{lo, lo + uint16(r.IntN(100))}
			}
		case 2:
			s.Proto = 17
		}
		p := spd.Policy{Name: fmt.Sprint("p", i), Sel: s, Action: spd.Protect, Target: i}
		if r.IntN(16) == 0 {
			p.Action, p.Target = spd.Action(2+r.IntN(2)), nil
		}
		ps[i] = p
	}
	return ps
}

// inside returns a random key that p's selector matches.
func inside(r *rand.Rand, s spd.Selector) spd.FlowKey {
	addrIn := func(p netip.Prefix) netip.Addr {
		b := p.Addr().As16()
		bits := p.Bits()
		if p.Addr().Is4() {
			bits += 96
		}
		for i := bits; i < 128; i++ {
			if r.IntN(2) == 0 {
				b[i/8] |= 0x80 >> (i % 8)
			}
		}
		a := netip.AddrFrom16(b)
		if p.Addr().Is4() {
			a = a.Unmap()
		}
		return a
	}
	k := spd.FlowKey{Src: addrIn(s.Src), Dst: addrIn(s.Dst), Proto: s.Proto}
	if k.Proto == 0 {
		k.Proto = []uint8{1, 6, 17}[r.IntN(3)]
	}
	if k.Proto != 1 {
		k.SPort = uint16(1024 + r.IntN(60000))
		k.DPort = uint16(1 + r.IntN(10000))
		if !s.DPort.IsAny() {
			k.DPort = s.DPort.Lo + uint16(r.IntN(int(s.DPort.Hi-s.DPort.Lo)+1))
		}
	}
	return k
}

func benchKeys(db *spd.DB, workload string) []spd.FlowKey {
	r := rand.New(rand.NewPCG(7, uint64(db.Len())))
	var keys []spd.FlowKey
	switch workload {
	case "last":
		for len(keys) < 16 {
			k := inside(r, db.Policy(db.Len()-1).Sel)
			if p := db.Lookup(&k); p == db.Policy(db.Len()-1) {
				keys = append(keys, k)
			}
		}
	case "mix", "churn":
		n := 1024
		if workload == "churn" {
			n = 65536
		}
		for range n {
			if r.IntN(10) == 0 {
				keys = append(keys, key("10.0.0.1", "192.0.2.1", 6, uint16(r.Uint32()), 443))
				continue
			}
			keys = append(keys, inside(r, db.Policy(r.IntN(db.Len())).Sel))
		}
	}
	return keys
}

var sink *spd.Policy

func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		db, err := spd.New(benchPolicies(n))
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range []string{"last", "mix", "churn"} {
			keys := benchKeys(db, w)
			b.Run(fmt.Sprintf("N=%d/%s/linear", n, w), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					k := &keys[i%len(keys)]
					sink = nil
					for j := range db.Len() {
						if p := db.Policy(j); p.Matches(k) {
							sink = p
							break
						}
					}
				}
			})
			b.Run(fmt.Sprintf("N=%d/%s/db", n, w), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					sink = db.Lookup(&keys[i%len(keys)])
				}
			})
			b.Run(fmt.Sprintf("N=%d/%s/cache", n, w), func(b *testing.B) {
				c := spd.NewCache(spd.DefaultCacheEntries)
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					sink = c.Lookup(db, &keys[i%len(keys)])
				}
			})
		}
	}
}

// BenchmarkNew measures building a DB: the cost of a policy change.
func BenchmarkNew(b *testing.B) {
	for _, n := range []int{10, 100, 1000, spd.MaxPolicies} {
		ps := benchPolicies(n)
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := spd.New(ps); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkExtractFlowKey parses a TCP/IPv4 packet and a UDP/IPv6 packet
// behind a hop-by-hop and a fragment header.
func BenchmarkExtractFlowKey(b *testing.B) {
	for _, c := range []struct {
		name string
		pkt  []byte
	}{
		{"ipv4-tcp", v4pkt(6, tcpHdr(40000, 443), 0, false)},
		{"ipv6-ext-udp", v6pkt([]ext{{typ: 0}, {typ: 44}}, 17, udpHdr(5000, 53))},
	} {
		b.Run(c.name, func(b *testing.B) {
			var k spd.FlowKey
			b.ReportAllocs()
			for b.Loop() {
				if !spd.ExtractFlowKey(c.pkt, &k) {
					b.Fatal("not parsed")
				}
			}
		})
	}
}
