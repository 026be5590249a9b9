package spd

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// DefaultCacheEntries is a flow cache size for one worker: 4096 entries in
// sets of two, 128 bytes a set, 256 KiB.
const DefaultCacheEntries = 4096

// maxCacheEntries bounds NewCache (64 MiB).
const maxCacheEntries = 1 << 20

// Cache is a per-worker flow cache in front of a DB: a fixed number of
// entries, two-way set-associative on a keyed hash of the FlowKey, each
// holding a key, the decision the DB gave for it (a match or no match) and
// the DB's generation. An entry counts only for the DB whose generation it
// holds, so publishing a new DB invalidates every worker's cache at once,
// without locks or messages.
//
// Entries hold the policy's index rather than a pointer: a cache does not
// keep a retired DB alive, and its memory holds no pointers for the garbage
// collector to scan.
//
// A Cache is not safe for concurrent use: each worker owns one (DESIGN.md:
// per-packet lookups are cached per worker).
type Cache struct {
	sets  []cacheSet
	mask  uint64
	seed  [4]uint64
	stats CacheStats
}

// CacheStats counts a cache's lookups.
type CacheStats struct {
	Hits   uint64 // answered from the cache
	Misses uint64 // answered by the DB, then cached
	Evicts uint64 // misses that replaced an entry of the current generation
}

// cacheKey is a valid FlowKey without pointers: netip.Addr holds one, for
// its zone, which valid keys do not have.
type cacheKey struct {
	src, dst u128 // addrPoint
	// Source port << 32 | destination port << 16 | protocol << 8 | family
	// (fam4 or fam6, which tells IPv4 from IPv4-mapped IPv6).
	rest uint64
}

type cacheEntry struct {
	key cacheKey
	pol int32  // policy index, -1 for no match
	gen uint64 // DB generation, 0 for an empty entry
}

// cacheSet is two entries, padded to two cache lines.
type cacheSet struct {
	e   [2]cacheEntry
	lru uint8 // the way to replace next: the one used less recently
	_   [15]byte
}

// NewCache returns an empty cache of the given number of entries, a power of
// two from 2 to 2^20; it panics on any other size. Each cache hashes with its
// own random seed, so that flows chosen to collide in one cache do not
// collide in another (nor across restarts).
func NewCache(entries int) *Cache {
	if entries < 2 || entries > maxCacheEntries || entries&(entries-1) != 0 {
		panic(fmt.Sprintf("spd: cache of %d entries (want a power of two from 2 to %d)", entries, maxCacheEntries))
	}
	return &Cache{
		sets: make([]cacheSet, entries/2),
		mask: uint64(entries/2 - 1),
		seed: [4]uint64{rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64()},
	}
}

// Lookup returns what db.Lookup(k) returns, from the cache when it holds the
// answer for k from db, else from db, then caching it (no match included, so
// that floods of unmatched flows stay cheap). A nil db matches nothing and
// caches nothing. Lookup does not allocate.
func (c *Cache) Lookup(db *DB, k *FlowKey) *Policy {
	if db == nil {
		return nil
	}
	fam := k.family()
	if fam == famNone {
		return nil // matches nothing; not worth an entry
	}
	key := cacheKey{addrPoint(k.Src), addrPoint(k.Dst), uint64(k.SPort)<<32 | uint64(k.DPort)<<16 | uint64(k.Proto)<<8 | uint64(fam)}
	// The hash, in the manner of wyhash: each step folds the 128-bit
	// product of two words, one of them keyed by the cache's secret seed.
	// Flows an attacker picks to collide in one cache land in different
	// sets of another.
	h := mix(mix(key.src.hi^c.seed[0], key.src.lo^c.seed[1])^key.rest, mix(key.dst.hi^c.seed[2], key.dst.lo^c.seed[3]))
	s := &c.sets[h&c.mask]
	for w := range s.e {
		if e := &s.e[w]; e.gen == db.gen && e.key.src == key.src && e.key.dst == key.dst && e.key.rest == key.rest {
			s.lru = uint8(w ^ 1)
			c.stats.Hits++
			if e.pol < 0 {
				return nil
			}
			return &db.policies[e.pol]
		}
	}
	c.stats.Misses++
	i := db.lookupPoints(fam, key.src, key.dst, k)
	w := s.lru
	if s.e[w].gen == db.gen {
		c.stats.Evicts++
	}
	s.e[w] = cacheEntry{key: key, pol: int32(i), gen: db.gen}
	s.lru = w ^ 1
	if i < 0 {
		return nil
	}
	return &db.policies[i]
}

// Stats returns the cache's counters. Like Lookup, it is for the owning
// worker, which publishes them as it publishes its other counters.
func (c *Cache) Stats() CacheStats { return c.stats }

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}
