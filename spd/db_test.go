package spd_test

import (
	"math/rand/v2"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicegw/sluice/spd"
)

// refMatch restates the selector semantics directly, as the reference for
// the differential test: ANY fields match everything, prefixes match their
// own family only, OPAQUE ports (0) match only ANY ranges, and keys whose
// addresses are invalid, mixed or zoned match nothing.
func refMatch(s spd.Selector, k spd.FlowKey) bool {
	if !k.Src.IsValid() || !k.Dst.IsValid() || k.Src.Is4() != k.Dst.Is4() || k.Src.Zone() != "" || k.Dst.Zone() != "" {
		return false
	}
	in := func(p netip.Prefix, a netip.Addr) bool {
		return p == netip.Prefix{} || p.Contains(a)
	}
	port := func(r spd.PortRange, p uint16) bool {
		if r.Lo == 0 && (r.Hi == 0 || r.Hi == 65535) {
			return true
		}
		return p != 0 && r.Lo <= p && p <= r.Hi
	}
	return in(s.Src, k.Src) && in(s.Dst, k.Dst) && (s.Proto == 0 || s.Proto == k.Proto) &&
		port(s.SPort, k.SPort) && port(s.DPort, k.DPort)
}

// linear is the naive ordered SPD: the index of the first policy that
// matches, or -1.
func linear(ps []spd.Policy, k *spd.FlowKey) int {
	for i := range ps {
		if refMatch(ps[i].Sel, *k) {
			return i
		}
	}
	return -1
}

// gen draws policies and keys from small pools of values, so that prefixes
// nest and overlap, ranges share ends, and keys fall on and next to the
// edges of the selectors. Strict generators give every policy both
// prefixes and a protocol, so that fewer catch-alls come first and more keys
// first match late in the list.
type gen struct {
	r      *rand.Rand
	strict bool
}

var (
	v4Bases = []string{"0.0.0.0", "10.0.0.0", "10.0.1.0", "10.0.0.128", "10.1.0.0", "10.0.0.255", "192.168.0.0", "255.255.255.255", "127.255.255.255", "128.0.0.0"}
	v6Bases = []string{"::", "2001:db8::", "2001:db8:0:1::", "2001:db8::8000:0:0:0", "2001:db8::ffff", "::ffff:10.0.0.0", "fe80::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "8000::", "7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}
	v4Bits  = []int{0, 1, 7, 8, 15, 16, 23, 24, 25, 30, 31, 32}
	v6Bits  = []int{0, 1, 32, 48, 63, 64, 65, 96, 104, 120, 127, 128}
	protos  = []uint8{0, 0, 0, 1, 6, 6, 17, 17, 132, 58, 50}
	ports   = []uint16{0, 1, 2, 22, 53, 80, 443, 1023, 1024, 8080, 65534, 65535}
)

func (g gen) pick(n int) int { return g.r.IntN(n) }

func (g gen) prefix(v6 bool) netip.Prefix {
	if v6 {
		return netip.PrefixFrom(netip.MustParseAddr(v6Bases[g.pick(len(v6Bases))]), v6Bits[g.pick(len(v6Bits))])
	}
	return netip.PrefixFrom(netip.MustParseAddr(v4Bases[g.pick(len(v4Bases))]), v4Bits[g.pick(len(v4Bits))])
}

func (g gen) portRange(proto uint8) spd.PortRange {
	if proto != 0 && proto != 6 && proto != 17 && proto != 132 || g.pick(2) == 0 {
		if g.pick(4) == 0 {
			return spd.PortRange{0, 65535}
		}
		return spd.PortRange{}
	}
	a, b := ports[g.pick(len(ports))], ports[g.pick(len(ports))]
	return spd.PortRange{min(a, b), max(a, b)}
}

func (g gen) policy(i int) spd.Policy {
	var s spd.Selector
	switch fam := g.pick(9); {
	case fam == 0 && !g.strict: // any family
	default:
		v6 := fam >= 5
		if g.pick(3) > 0 || g.strict {
			s.Src = g.prefix(v6)
		}
		if g.pick(3) > 0 || g.strict || s.Src == (netip.Prefix{}) {
			s.Dst = g.prefix(v6)
		}
	}
	for s.Proto = protos[g.pick(len(protos))]; s.Proto == 0 && g.strict; {
		s.Proto = protos[g.pick(len(protos))]
	}
	s.SPort, s.DPort = g.portRange(s.Proto), g.portRange(s.Proto)
	p := spd.Policy{Sel: s, Action: spd.Action(1 + g.pick(3))}
	if p.Action == spd.Protect {
		p.Target = i
	}
	return p
}

// edge returns an address on or next to an edge of p (the first or last
// address of a family for the zero Prefix), or a random one inside it.
func (g gen) edge(p netip.Prefix, v6 bool) netip.Addr {
	if p == (netip.Prefix{}) {
		p = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if v6 {
			p = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
	}
	p = p.Masked()
	b := p.Addr().As16()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	first, last, random := b, b, b
	for i := bits; i < 128; i++ {
		last[i/8] |= 0x80 >> (i % 8)
		if g.pick(2) == 0 {
			random[i/8] |= 0x80 >> (i % 8)
		}
	}
	conv := func(b [16]byte) netip.Addr {
		if p.Addr().Is4() {
			return netip.AddrFrom16(b).Unmap()
		}
		return netip.AddrFrom16(b)
	}
	var a netip.Addr
	switch g.pick(5) {
	case 0:
		a = conv(first)
	case 1:
		a = conv(last)
	case 2:
		a = conv(first).Prev()
	case 3:
		a = conv(last).Next()
	default:
		a = conv(random)
	}
	if !a.IsValid() { // Prev of 0 or Next of all ones
		return conv(first)
	}
	return a
}

func (g gen) port(r spd.PortRange) uint16 {
	p := ports[g.pick(len(ports))]
	if !r.IsAny() && g.pick(2) == 0 {
		p = []uint16{r.Lo, r.Hi}[g.pick(2)]
	}
	switch g.pick(4) {
	case 0:
		return p - 1
	case 1:
		return p + 1
	}
	return p
}

// key returns a key on or near the edges of a random policy of ps (or of a
// random prefix of the pools), now and then malformed.
func (g gen) key(ps []spd.Policy) spd.FlowKey {
	var s spd.Selector
	if len(ps) > 0 && g.pick(4) > 0 {
		s = ps[g.pick(len(ps))].Sel
	} else {
		v6 := g.pick(2) == 0
		s.Src, s.Dst = g.prefix(v6), g.prefix(v6)
	}
	v6 := s.Src.Addr().Is6() || s.Dst.Addr().Is6() || s.Src == s.Dst && g.pick(2) == 0
	k := spd.FlowKey{Src: g.edge(s.Src, v6), Dst: g.edge(s.Dst, v6), Proto: s.Proto}
	if k.Proto == 0 || g.pick(8) == 0 {
		k.Proto = protos[g.pick(len(protos))]
	}
	if g.pick(10) == 0 {
		k.Proto = uint8(g.r.Uint32())
	}
	k.SPort, k.DPort = g.port(s.SPort), g.port(s.DPort)
	switch g.pick(50) {
	case 0:
		k.Dst = g.edge(g.prefix(!v6), !v6) // mixed families
	case 1:
		k.Src = netip.Addr{}
	case 2:
		if v6 {
			k.Src = k.Src.WithZone("eth0")
		}
	}
	return k
}

// TestLookupEqualsLinear is the differential test: over random SPDs of up
// to 1000 policies and keys on their edges, DB.Lookup, Cache.Lookup and
// Policy.Matches agree with the naive linear first-match scan.
func TestLookupEqualsLinear(t *testing.T) {
	sizes := []int{0, 1, 2, 3, 5, 8, 13, 31, 63, 64, 65, 100, 127, 128, 129, 200, 1000}
	r := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		sizes = append(sizes, r.IntN(300))
	}
	if testing.Short() {
		sizes = sizes[:20]
	}
	keys := 2000
	matched, deep := 0, 0
	for trial, n := range sizes {
		g := gen{rand.New(rand.NewPCG(uint64(trial), uint64(n))), trial%2 == 1}
		ps := make([]spd.Policy, n)
		for i := range ps {
			ps[i] = g.policy(i)
		}
		db, err := spd.New(ps)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		c := spd.NewCache(256)
		for j := range keys {
			k := g.key(ps)
			want := linear(ps, &k)
			var wantP *spd.Policy
			if want >= 0 {
				wantP = db.Policy(want)
				matched++
				if want >= n/2 {
					deep++
				}
			}
			if got := db.Lookup(&k); got != wantP {
				t.Fatalf("trial %d, %d policies: Lookup(%+v) = %s, linear scan = %d (%v)", trial, n, k, describe(db, got), want, ps[max(want, 0)].Sel)
			}
			if got := c.Lookup(db, &k); got != wantP {
				t.Fatalf("trial %d: Cache.Lookup(%+v) = %s, want %d", trial, k, describe(db, got), want)
			}
			if j >= 500 {
				continue // Matches is checked on the first keys only
			}
			for i := range ps[:min(n, 64)] {
				if got, want := db.Policy(i).Matches(&k), refMatch(ps[i].Sel, k); got != want {
					t.Fatalf("trial %d: canonical policy %d {%v} Matches(%+v) = %v, want %v", trial, i, db.Policy(i).Sel, k, got, want)
				}
				if got, want := ps[i].Matches(&k), refMatch(ps[i].Sel, k); got != want {
					t.Fatalf("trial %d: policy %d {%v} Matches(%+v) = %v, want %v", trial, i, ps[i].Sel, k, got, want)
				}
			}
		}
	}
	total := len(sizes) * keys
	t.Logf("%d SPDs, %d keys: %d matched, %d of them in the second half", len(sizes), total, matched, deep)
	if matched < total/4 || matched > total*9/10 || deep < total/20 {
		t.Errorf("the generator does not exercise matching: of %d keys %d matched, %d in the second half", total, matched, deep)
	}
}

func describe(db *spd.DB, p *spd.Policy) string {
	if p == nil {
		return "nil"
	}
	for i := range db.Len() {
		if db.Policy(i) == p {
			return "policy " + strconv.Itoa(i) + " {" + p.Sel.String() + "}"
		}
	}
	return "a policy not in db"
}

// TestClassifierMemory checks the bound classify.go states, (8n+260)
// vectors of n bits per family, on the benchmark's SPD and random ones, up
// to MaxPolicies; and that 1000 realistic policies take well under it.
func TestClassifierMemory(t *testing.T) {
	bound := func(n int) int { return 2 * (8*n + 260) * 8 * ((n + 63) / 64) }
	sizes := []int{1000, spd.MaxPolicies}
	if testing.Short() {
		sizes = sizes[:1]
	}
	for _, n := range sizes {
		g := gen{rand.New(rand.NewPCG(3, uint64(n))), false}
		ps := make([]spd.Policy, n)
		for i := range ps {
			ps[i] = g.policy(i)
		}
		for _, ps := range [][]spd.Policy{ps, benchPolicies(n)} {
			db, err := spd.New(ps)
			if err != nil {
				t.Fatal(err)
			}
			got := spd.VecBytes(db)
			if got > bound(n) {
				t.Errorf("%d policies take %d bytes of vectors, more than the bound %d", n, got, bound(n))
			}
			t.Logf("%d policies: %d KiB of vectors (bound %d KiB)", n, got>>10, bound(n)>>10)
		}
	}
	if got := spd.VecBytes(mustNew(t, benchPolicies(1000)...)); got > 512<<10 {
		t.Errorf("the benchmark's 1000 policies take %d KiB of vectors, want under 512", got>>10)
	}
}

func TestGeneration(t *testing.T) {
	var nilDB *spd.DB
	if nilDB.Generation() != 0 || nilDB.Lookup(&spd.FlowKey{}) != nil || nilDB.Len() != 0 {
		t.Error("nil DB is not empty with generation 0")
	}
	a, _ := spd.New(nil)
	b, _ := spd.New(nil)
	if _, err := spd.New([]spd.Policy{{}}); err == nil {
		t.Fatal("New accepted a policy without action")
	}
	c, _ := spd.New(nil)
	if a.Generation() == 0 || !(a.Generation() < b.Generation() && b.Generation() < c.Generation()) {
		t.Errorf("generations %d, %d, %d: want nonzero and increasing", a.Generation(), b.Generation(), c.Generation())
	}
	k := key("10.0.0.1", "10.0.0.2", 6, 1, 2)
	if a.Lookup(&k) != nil {
		t.Error("empty DB matched")
	}
}

func TestLookupAllocs(t *testing.T) {
	db, err := spd.New(benchPolicies(1000))
	if err != nil {
		t.Fatal(err)
	}
	keys := benchKeys(db, "mix")
	c := spd.NewCache(spd.DefaultCacheEntries)
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		k := &keys[i%len(keys)]
		i++
		if db.Lookup(k) != c.Lookup(db, k) {
			panic("cache disagrees")
		}
	}); n != 0 {
		t.Errorf("Lookup allocates %v times per call", n)
	}
}

// TestConcurrentSwap runs workers, each with its own cache, against a DB
// that another goroutine keeps replacing, as the data plane does: every
// answer must be the one the DB the worker loaded gives (run with -race).
func TestConcurrentSwap(t *testing.T) {
	mk := func(i int) *spd.DB {
		act := spd.Bypass
		if i%2 == 1 {
			act = spd.Discard
		}
		db, err := spd.New([]spd.Policy{
			{Name: "a", Sel: spd.Selector{Dst: pfx("10.0.0.0/24"), Proto: 6}, Action: act},
			{Name: "b", Sel: spd.Selector{Dst: pfx("10.0.0.0/16")}, Action: spd.Protect, Target: i},
		})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	var cur atomic.Pointer[spd.DB]
	cur.Store(mk(0))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var errs atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			c := spd.NewCache(64)
			keys := []spd.FlowKey{
				key("192.0.2.1", "10.0.0.5", 6, 1, 80),
				key("192.0.2.1", "10.0.1.5", 6, 1, 80),
				key("192.0.2.1", "10.0.0.5", 17, 1, 80),
				key("192.0.2.1", "10.1.0.5", 17, 1, 80),
			}
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				db := cur.Load()
				k := &keys[i%len(keys)]
				if c.Lookup(db, k) != db.Lookup(k) {
					errs.Add(1)
				}
			}
		})
	}
	for i := 1; i <= 200; i++ {
		cur.Store(mk(i))
	}
	close(stop)
	wg.Wait()
	if n := errs.Load(); n != 0 {
		t.Errorf("%d cached answers differed from their DB's", n)
	}
}
