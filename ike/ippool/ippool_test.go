package ippool

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

func mustNew(t *testing.T, addrs string) *Pool {
	t.Helper()
	p, err := New(Config{Name: "rw", Addrs: addrs})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestBounds: a prefix gives neither its first nor its last address when
// it has more than two (strongSwan's mem_pool_create), a range all of
// its addresses, and a pool holds at most 2^31.
func TestBounds(t *testing.T) {
	for _, c := range []struct {
		addrs       string
		first, last string
		size        int
	}{
		{"10.3.0.0/24", "10.3.0.1", "10.3.0.254", 254},
		{"10.3.0.77/24", "10.3.0.1", "10.3.0.254", 254}, // host bits are masked
		{"10.3.0.0/30", "10.3.0.1", "10.3.0.2", 2},
		{"10.3.0.0/31", "10.3.0.0", "10.3.0.1", 2},
		{"10.3.0.9/32", "10.3.0.9", "10.3.0.9", 1},
		{"10.3.0.10-10.3.0.200", "10.3.0.10", "10.3.0.200", 191},
		{"10.3.0.10 - 10.3.0.10", "10.3.0.10", "10.3.0.10", 1},
		{"10.0.0.0/8", "10.0.0.1", "10.255.255.254", 1<<24 - 2},
		{"fd00:3::/126", "fd00:3::1", "fd00:3::2", 2},
		{"fd00:3::/112", "fd00:3::1", "fd00:3::fffe", 65534},
		{"fd00:3::/64", "fd00:3::1", "fd00:3::7fff:fffe", 1<<31 - 2},
		{"fd00:3::ffff:fff0-fd00:3::1:0:f", "fd00:3::ffff:fff0", "fd00:3::1:0:f", 32},
	} {
		p := mustNew(t, c.addrs)
		if p.First() != ip(c.first) || p.Last() != ip(c.last) || p.Size() != c.size {
			t.Errorf("%s: %v-%v (%d), want %s-%s (%d)", c.addrs, p.First(), p.Last(), p.Size(), c.first, c.last, c.size)
		}
		if !p.Contains(ip(c.first)) || !p.Contains(ip(c.last)) || p.Contains(ip(c.last).Next()) || p.Contains(ip(c.first).Prev()) {
			t.Errorf("%s: Contains disagrees with the bounds", c.addrs)
		}
	}
	for _, c := range []struct{ addrs, err string }{
		{"10.3.0.200-10.3.0.10", "ends before it starts"},
		{"10.3.0.1-fd00::1", "mixes families"},
		{"fd00::-fd00::1:0:0", "more than 2^31"},
		{"10.3.0.0", "neither a prefix nor a range"},
		{"10.3.0.x-10.3.0.9", "range"},
	} {
		if _, err := New(Config{Name: "rw", Addrs: c.addrs}); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want %q", c.addrs, err, c.err)
		}
	}
}

func stats(t *testing.T, p *Pool, online, offline int) {
	t.Helper()
	if s := p.Stats(); s.Online != online || s.Offline != offline {
		t.Fatalf("stats %+v, want %d online, %d offline", s, online, offline)
	}
}

// TestLeaseKept: an identity gets its address again while its lease
// exists, online (shared by a second holder) or offline.
func TestLeaseKept(t *testing.T) {
	p := mustNew(t, "10.3.0.0/24")
	a, err := p.Acquire("alice", netip.Addr{})
	if err != nil || a != ip("10.3.0.1") {
		t.Fatalf("alice: %v %v", a, err)
	}
	b, _ := p.Acquire("bob", netip.IPv4Unspecified())
	if b != ip("10.3.0.2") {
		t.Fatalf("bob: %v", b)
	}
	if a2, _ := p.Acquire("alice", netip.Addr{}); a2 != a {
		t.Fatalf("alice's second IKE SA got %v, want %v", a2, a)
	}
	stats(t, p, 2, 0)
	if !p.Release("alice", a) {
		t.Fatal("release")
	}
	stats(t, p, 2, 0) // one holder left
	p.Release("alice", a)
	stats(t, p, 1, 1)
	if p.Release("alice", a) || p.Release("bob", a) {
		t.Fatal("released a lease not held")
	}
	if id, online, ok := p.Lease(a); id != "alice" || online || !ok {
		t.Fatalf("lease of %v: %q online=%v ok=%v", a, id, online, ok)
	}
	c, _ := p.Acquire("carol", netip.Addr{})
	if c != ip("10.3.0.3") {
		t.Fatalf("carol got %v: an offline lease is taken before a new address", c)
	}
	if a3, _ := p.Acquire("alice", netip.Addr{}); a3 != a {
		t.Fatalf("alice came back to %v, want %v", a3, a)
	}
	stats(t, p, 3, 0)
}

// TestWanted: an address asked for is granted when nobody has a lease for
// it, and never handed out to another identity after.
func TestWanted(t *testing.T) {
	p := mustNew(t, "10.3.0.0/29") // .1 to .6
	if a, _ := p.Acquire("alice", ip("10.3.0.2")); a != ip("10.3.0.2") {
		t.Fatalf("alice got %v", a)
	}
	if a, _ := p.Acquire("bob", ip("10.3.0.2")); a != ip("10.3.0.1") {
		t.Fatalf("bob, wanting alice's address, got %v", a)
	}
	if a, _ := p.Acquire("carol", netip.Addr{}); a != ip("10.3.0.3") {
		t.Fatalf("carol got %v, the wanted address is skipped", a)
	}
	if a, _ := p.Acquire("dave", ip("192.0.2.1")); a != ip("10.3.0.4") {
		t.Fatalf("dave, wanting an address outside, got %v", a)
	}
	// Bob's lease is offline: he may move to a free address he asks for.
	p.Release("bob", ip("10.3.0.1"))
	if a, _ := p.Acquire("bob", ip("10.3.0.6")); a != ip("10.3.0.6") {
		t.Fatalf("bob got %v", a)
	}
	if _, _, ok := p.Lease(ip("10.3.0.1")); ok {
		t.Fatal("bob's old lease is still there")
	}
	// Online, he keeps his address whatever he asks.
	if a, _ := p.Acquire("bob", ip("10.3.0.5")); a != ip("10.3.0.6") {
		t.Fatalf("bob's second IKE SA got %v", a)
	}
	stats(t, p, 4, 0)
}

// TestExhausted: with every address online the pool is exhausted; an
// offline lease of another identity is taken over.
func TestExhausted(t *testing.T) {
	p := mustNew(t, "10.3.0.0/30") // .1 and .2
	p.Acquire("alice", netip.Addr{})
	p.Acquire("bob", netip.Addr{})
	if a, err := p.Acquire("carol", netip.Addr{}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("carol got %v, %v", a, err)
	}
	p.Release("bob", ip("10.3.0.2"))
	if a, err := p.Acquire("carol", netip.Addr{}); err != nil || a != ip("10.3.0.2") {
		t.Fatalf("carol got %v, %v: bob's offline lease should be hers", a, err)
	}
	if _, err := p.Acquire("bob", netip.Addr{}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("bob: %v", err)
	}
	stats(t, p, 2, 0)
}

// TestPools: the rounds run over all pools of the family, an existing
// lease in a later pool before a new address in an earlier one.
func TestPools(t *testing.T) {
	p1 := mustNew(t, "10.3.0.0/30")
	p2 := mustNew(t, "10.4.0.0/30")
	p6 := mustNew(t, "fd00:3::/126")
	pools := []*Pool{p6, p1, p2}
	for _, id := range []string{"a", "b", "c"} {
		if _, _, err := Acquire(pools, id, netip.Addr{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, pool, _ := Acquire(pools, "c", netip.Addr{}); pool != p2 {
		t.Fatal("c's lease in the second pool was not found first")
	}
	if a, pool, err := Acquire(pools, "a", netip.IPv6Unspecified()); err != nil || pool != p6 || a != ip("fd00:3::1") {
		t.Fatalf("IPv6: %v %v %v", a, pool, err)
	}
	if _, _, err := Acquire([]*Pool{p1}, "a", netip.IPv6Unspecified()); err == nil || errors.Is(err, ErrExhausted) {
		t.Fatalf("no IPv6 pool: %v", err)
	}
}

// TestConcurrent: identities acquire and release at once; no address is
// ever online for two identities, and the counts add up.
func TestConcurrent(t *testing.T) {
	p := mustNew(t, "10.3.0.0/26") // 62 addresses
	var (
		mu     sync.Mutex
		holder = map[netip.Addr]string{}
		wg     sync.WaitGroup
	)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				id := fmt.Sprintf("g%d-%d", g, i%7)
				a, err := p.Acquire(id, netip.Addr{})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if h, ok := holder[a]; ok {
					t.Errorf("%v held by %s and %s", a, h, id)
				}
				holder[a] = id
				delete(holder, a)
				mu.Unlock()
				if !p.Release(id, a) {
					t.Errorf("%s could not release %v", id, a)
				}
			}
		}()
	}
	wg.Wait()
	if s := p.Stats(); s.Online != 0 || s.Offline != 56 {
		t.Fatalf("stats %+v, want 56 offline leases", s)
	}
}

// TestNoAllocs: taking and releasing a lease that exists allocates
// nothing.
func TestNoAllocs(t *testing.T) {
	p := mustNew(t, "fd00:3::/112")
	a, _ := p.Acquire("alice", netip.Addr{})
	p.Release("alice", a)
	n := testing.AllocsPerRun(1000, func() {
		b, err := p.Acquire("alice", netip.Addr{})
		if err != nil || b != a || !p.Release("alice", b) {
			t.Fatal("lease lost")
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per acquire and release", n)
	}
}

// TestTake: a standby leases exactly the address the snapshot names: a
// free one, one its identity holds (once more), one another identity
// left offline (reassigned); never one another identity holds online, nor
// a second one for an identity online elsewhere.
func TestTake(t *testing.T) {
	p, err := New(Config{Name: "rw", Addrs: "10.3.0.0/29"})
	if err != nil {
		t.Fatal(err)
	}
	a1, a2, a3 := netip.MustParseAddr("10.3.0.1"), netip.MustParseAddr("10.3.0.2"), netip.MustParseAddr("10.3.0.3")
	if err := p.Take("carol", a2); err != nil {
		t.Fatal(err)
	}
	if err := p.Take("carol", a2); err != nil {
		t.Fatal(err)
	}
	if err := p.Take("dave", a2); !errors.Is(err, ErrTaken) {
		t.Fatalf("dave took carol's online address: %v", err)
	}
	if err := p.Take("carol", a3); !errors.Is(err, ErrTaken) {
		t.Fatalf("carol took a second address: %v", err)
	}
	if got, _ := p.Acquire("eve", netip.Addr{}); got != a1 {
		t.Fatalf("eve got %v", got)
	}
	p.Release("eve", a1)
	if err := p.Take("dave", a1); err != nil {
		t.Fatalf("dave over eve's offline lease: %v", err)
	}
	if who, online, _ := p.Lease(a1); who != "dave" || !online {
		t.Fatalf("%v: %q online %v", a1, who, online)
	}
	p.Release("dave", a1)
	if err := p.Take("dave", a3); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := p.Lease(a1); ok {
		t.Fatal("dave's old offline lease kept")
	}
	if s := p.Stats(); s.Online != 2 || s.Offline != 0 {
		t.Fatalf("stats %+v", s)
	}
	if err := p.Take("frank", netip.MustParseAddr("10.9.0.1")); err == nil {
		t.Fatal("an address outside the pool was taken")
	}
	// Acquire skips what Take took.
	if got, _ := p.Acquire("grace", netip.Addr{}); got != netip.MustParseAddr("10.3.0.4") {
		t.Fatalf("grace got %v", got)
	}
}

// TestReconfigure: a pool given new addresses in place keeps the leases
// whose addresses it still holds (online and offline, at the same
// address for the same identity), forgets the others (an online one is
// returned as orphaned and never handed out again while outside), hands
// out afresh past the kept leases, and refuses the other family.
func TestReconfigure(t *testing.T) {
	p := mustNew(t, "10.3.0.0/24")
	addr := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	for _, id := range []string{"a", "b", "c", "d"} { // .1 .2 .3 .4
		if _, err := p.Acquire(id, netip.Addr{}); err != nil {
			t.Fatal(err)
		}
	}
	p.Release("b", addr("10.3.0.2"))
	p.Release("d", addr("10.3.0.4"))
	// .1 (a, online) and .2 (b, offline) stay; .3 (c, online) and .4
	// (d, offline) go.
	if _, err := p.Reconfigure(Config{Name: "ignored", Addrs: "10.3.0.1-10.3.0.2, "}); err == nil {
		t.Fatal("a malformed range was taken")
	}
	orphaned, err := p.Reconfigure(Config{Addrs: "10.3.0.1-10.3.0.2", DNS: []netip.Addr{addr("10.3.0.53")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(orphaned) != 1 || orphaned[0] != addr("10.3.0.3") {
		t.Fatalf("orphaned %v", orphaned)
	}
	if s := p.Stats(); s.Size != 2 || s.Online != 1 || s.Offline != 1 || p.Name() != "rw" || p.DNS()[0] != addr("10.3.0.53") {
		t.Fatalf("after: %+v %q %v", s, p.Name(), p.DNS())
	}
	if who, online, _ := p.Lease(addr("10.3.0.1")); who != "a" || !online {
		t.Fatalf(".1: %q %v", who, online)
	}
	if got, _ := p.Acquire("b", netip.Addr{}); got != addr("10.3.0.2") {
		t.Fatalf("b came back to %v", got)
	}
	if _, err := p.Acquire("e", netip.Addr{}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("e: %v, want ErrExhausted", err)
	}
	// Grown again while c holds .3: c's lease returns, e gets .4.
	if _, err := p.Reconfigure(Config{Addrs: "10.3.0.1-10.3.0.4"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Acquire("e", netip.Addr{}); got != addr("10.3.0.4") {
		t.Fatalf("e got %v", got)
	}
	if who, online, _ := p.Lease(addr("10.3.0.3")); who != "c" || !online {
		t.Fatalf(".3 back: %q %v", who, online)
	}
	// Out again, and c lets go: the orphan is gone; in again, .3 is free.
	if _, err := p.Reconfigure(Config{Addrs: "10.3.0.1-10.3.0.2"}); err != nil {
		t.Fatal(err)
	}
	if p.Release("x", addr("10.3.0.3")) || !p.Release("c", addr("10.3.0.3")) || p.Release("c", addr("10.3.0.3")) {
		t.Fatal("releasing the orphaned lease")
	}
	if _, err := p.Reconfigure(Config{Addrs: "10.3.0.1-10.3.0.3"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Acquire("f", netip.Addr{}); got != addr("10.3.0.3") {
		t.Fatalf("f got %v", got)
	}
	if _, err := p.Reconfigure(Config{Addrs: "fd00::/120"}); err == nil {
		t.Fatal("the other family was taken")
	}
}
