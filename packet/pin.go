package packet

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Pinned arenas. An engine written in C takes a whole batch in one call by
// being handed addresses into packet memory (DESIGN.md decision 11); cgo
// lets C hold a Go address only while the memory it points into is pinned
// (runtime.Pinner). Pinning per packet costs more than the crypto, so
// arenas are pinned once, for their life, and recorded here: an engine
// checks in a few comparisons that a slice lies in a pinned arena and then
// gives C its address as it is.

type pinnedRange struct{ lo, hi uintptr }

var (
	pinMu  sync.Mutex                    // serialises writers of pinned
	pinned atomic.Pointer[[]pinnedRange] // sorted by lo; copied on write
)

// PinArena pins arena, which must be a whole allocation of its own (as
// made by make([]byte, n)), and records it for PinnedRange. The returned
// function unpins it and forgets it; call it once, when no engine uses the
// arena any more. Pools pin their arenas for their own life.
func PinArena(arena []byte) (unpin func()) {
	if len(arena) == 0 {
		return func() {}
	}
	p := new(runtime.Pinner)
	p.Pin(unsafe.SliceData(arena))
	r := pinnedRange{uintptr(unsafe.Pointer(unsafe.SliceData(arena))), 0}
	r.hi = r.lo + uintptr(len(arena))
	pinMu.Lock()
	old := pinned.Load()
	var rs []pinnedRange
	if old != nil {
		rs = slices.Clone(*old)
	}
	i, _ := slices.BinarySearchFunc(rs, r.lo, func(x pinnedRange, lo uintptr) int { return cmpUintptr(x.lo, lo) })
	rs = slices.Insert(rs, i, r)
	pinned.Store(&rs)
	pinMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			pinMu.Lock()
			rs := slices.DeleteFunc(slices.Clone(*pinned.Load()), func(x pinnedRange) bool { return x == r })
			pinned.Store(&rs)
			pinMu.Unlock()
			p.Unpin()
		})
	}
}

func cmpUintptr(a, b uintptr) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// PinnedRange reports whether the n bytes at p lie in one pinned arena,
// and returns that arena's address range [lo, hi) so that a caller can
// check further slices against it without another lookup. Memory reached
// through a live slice into a pinned arena stays pinned as long as the
// arena's owner keeps it so. It does not allocate and takes no lock.
func PinnedRange(p unsafe.Pointer, n int) (lo, hi uintptr, ok bool) {
	rs := pinned.Load()
	if rs == nil || n < 0 {
		return 0, 0, false
	}
	a := uintptr(p)
	// The last range starting at or before a.
	i, j := 0, len(*rs)
	for i < j {
		h := int(uint(i+j) >> 1)
		if (*rs)[h].lo <= a {
			i = h + 1
		} else {
			j = h
		}
	}
	if i == 0 {
		return 0, 0, false
	}
	r := (*rs)[i-1]
	if a+uintptr(n) > r.hi || a+uintptr(n) < a {
		return 0, 0, false
	}
	return r.lo, r.hi, true
}

// Pins hands the addresses of byte slices to C for the length of one call,
// within cgo's rules: memory in a pinned arena as it is, any other memory
// pinned (runtime.Pinner) until Unpin. Engines written in C fill their
// descriptors through it. A Pins is used by one goroutine; the zero value
// is ready.
type Pins struct {
	pin     runtime.Pinner
	pinning bool
	lo, hi  uintptr // the pinned arena found last, valid until Unpin
}

// Addr returns the address of b's first byte for C, pinning b's memory
// first unless it lies in a pinned arena; 0 for an empty b. A slice in the
// arena found last costs two comparisons.
func (p *Pins) Addr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	ptr := unsafe.Pointer(unsafe.SliceData(b))
	if u := uintptr(ptr); u < p.lo || u+uintptr(len(b)) > p.hi {
		if !p.InArena(ptr, len(b)) {
			p.pin.Pin(ptr)
			p.pinning = true
		}
	}
	return uintptr(ptr)
}

// Covers reports whether the n bytes at address u (n at least 1) lie in
// the arena Addr or InArena found last, so that their address may go to C
// as it is. It is Addr's fast path, small enough for the compiler to
// inline into an engine's descriptor fill; on false, call Addr.
func (p *Pins) Covers(u, n uintptr) bool {
	// lo <= u < hi and 1 <= n <= hi-u, in unsigned arithmetic.
	return u-p.lo < p.hi-p.lo && n-1 < p.hi-u
}

// InArena reports whether the n bytes at ptr lie in one pinned arena, and
// remembers the arena if they do.
func (p *Pins) InArena(ptr unsafe.Pointer, n int) bool {
	lo, hi, ok := PinnedRange(ptr, n)
	if ok {
		p.lo, p.hi = lo, hi
	}
	return ok
}

// Unpin ends what Addr pinned and forgets the arena; call it when C has
// returned and holds no address any more.
func (p *Pins) Unpin() {
	if p.pinning {
		p.pin.Unpin()
		p.pinning = false
	}
	p.lo, p.hi = 0, 0
}
