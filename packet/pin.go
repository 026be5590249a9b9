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
