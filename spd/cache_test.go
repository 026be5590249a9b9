package spd_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/sluicegw/sluice/spd"
)

func mustNew(t testing.TB, ps ...spd.Policy) *spd.DB {
	t.Helper()
	db, err := spd.New(ps)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestCacheHitMiss(t *testing.T) {
	db := mustNew(t,
		spd.Policy{Name: "web", Sel: spd.Selector{Proto: 6, DPort: spd.PortRange{443, 443}}, Action: spd.Protect, Target: "sa"},
	)
	c := spd.NewCache(spd.DefaultCacheEntries)
	web := key("10.0.0.1", "10.0.0.2", 6, 40000, 443)
	other := key("10.0.0.1", "10.0.0.2", 6, 40000, 80)
	for i := range 3 {
		if p := c.Lookup(db, &web); p != db.Policy(0) {
			t.Fatalf("lookup %d of web = %v", i, p)
		}
		if p := c.Lookup(db, &other); p != nil {
			t.Fatalf("lookup %d of other = %v, want nil", i, p)
		}
	}
	if s := c.Stats(); s != (spd.CacheStats{Hits: 4, Misses: 2}) {
		t.Errorf("stats %+v, want 4 hits (no-match cached too), 2 misses", s)
	}
	// Keys that match nothing whatever the DB are not cached.
	bad := key("10.0.0.1", "2001:db8::1", 6, 1, 2)
	c.Lookup(db, &bad)
	if c.Lookup(nil, &web) != nil {
		t.Error("nil DB matched")
	}
	if s := c.Stats(); s != (spd.CacheStats{Hits: 4, Misses: 2}) {
		t.Errorf("stats %+v after uncacheable lookups, want unchanged", s)
	}
}

// TestCacheGeneration replaces the DB under a warm cache: answers follow the
// DB passed in, in both directions, and for flows that matched nothing.
func TestCacheGeneration(t *testing.T) {
	k := key("10.0.0.1", "10.0.0.2", 17, 5000, 53)
	dbA := mustNew(t, spd.Policy{Name: "a", Sel: spd.Selector{Proto: 17}, Action: spd.Bypass})
	dbB := mustNew(t, spd.Policy{Name: "b", Sel: spd.Selector{Proto: 17}, Action: spd.Bypass})
	dbNone := mustNew(t, spd.Policy{Name: "tcp", Sel: spd.Selector{Proto: 6}, Action: spd.Bypass})
	c := spd.NewCache(8)
	for i, db := range []*spd.DB{dbA, dbA, dbB, dbB, dbNone, dbNone, dbA, dbB, dbA} {
		want := db.Lookup(&k)
		if got := c.Lookup(db, &k); got != want {
			t.Fatalf("step %d (generation %d): cached %v, DB says %v", i, db.Generation(), got, want)
		}
	}
	// Misses at steps 0, 2, 4, 6, 7; the last step hits the entry step 6
	// made for dbA in the other way (a DB's answers never change).
	if s := c.Stats(); s != (spd.CacheStats{Hits: 4, Misses: 5}) {
		t.Errorf("stats %+v, want 4 hits and 5 misses", s)
	}
}

// TestCacheCollisions uses a cache of one set of two ways, where every flow
// collides: answers stay right and the least recently used way is replaced.
func TestCacheCollisions(t *testing.T) {
	db := mustNew(t,
		spd.Policy{Name: "p1", Sel: spd.Selector{DPort: spd.PortRange{1, 1}}, Action: spd.Bypass},
		spd.Policy{Name: "p2", Sel: spd.Selector{DPort: spd.PortRange{2, 2}}, Action: spd.Bypass},
		spd.Policy{Name: "p3", Sel: spd.Selector{DPort: spd.PortRange{3, 3}}, Action: spd.Bypass},
	)
	c := spd.NewCache(2)
	flows := map[string]spd.FlowKey{
		"A": key("10.0.0.1", "10.0.0.2", 6, 9, 1),
		"B": key("10.0.0.1", "10.0.0.2", 6, 9, 2),
		"C": key("10.0.0.1", "10.0.0.2", 6, 9, 3),
		"D": key("10.0.0.1", "10.0.0.2", 6, 9, 4), // matches nothing
	}
	for i, step := range []struct {
		flow string
		hit  bool
	}{
		{"A", false}, {"B", false}, {"A", true}, {"B", true},
		// C replaces A, the less recently used; A then replaces C.
		{"C", false}, {"B", true}, {"A", false},
		{"B", true}, {"A", true}, {"D", false}, {"A", true}, {"B", false},
	} {
		k := flows[step.flow]
		before := c.Stats()
		if got, want := c.Lookup(db, &k), db.Lookup(&k); got != want {
			t.Fatalf("step %d (%s): got %v, want %v", i, step.flow, got, want)
		}
		if hit := c.Stats().Hits > before.Hits; hit != step.hit {
			t.Fatalf("step %d (%s): hit = %v, want %v", i, step.flow, hit, step.hit)
		}
	}
	if s := c.Stats(); s.Evicts != 4 {
		t.Errorf("stats %+v, want 4 evictions", s)
	}

	// A bigger cache full of colliding and distinct flows still answers
	// exactly as the DB does.
	big := spd.NewCache(64)
	for i := range 10000 {
		k := key("10.0.0.1", "10.0.0.2", 6, uint16(i%300), uint16(i%5))
		if got, want := big.Lookup(db, &k), db.Lookup(&k); got != want {
			t.Fatalf("flow %d: got %v, want %v", i, got, want)
		}
	}
}

// TestCacheDoesNotPinDB checks that a retired DB can be collected while
// caches still hold entries from it.
func TestCacheDoesNotPinDB(t *testing.T) {
	c := spd.NewCache(16)
	done := make(chan struct{})
	func() {
		db := mustNew(t, spd.Policy{Name: "x", Action: spd.Protect, Target: make([]byte, 1<<20)})
		k := key("10.0.0.1", "10.0.0.2", 6, 1, 2)
		c.Lookup(db, &k)
		runtime.AddCleanup(db, func(ch chan struct{}) { close(ch) }, done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		select {
		case <-done:
			runtime.KeepAlive(c)
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the DB was not collected: the cache keeps it alive")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNewCachePanics(t *testing.T) {
	for _, n := range []int{-2, 0, 1, 3, 4095, 1 << 21} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewCache(%d) did not panic", n)
				}
			}()
			spd.NewCache(n)
		}()
	}
}
