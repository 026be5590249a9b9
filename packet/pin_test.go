package packet

import (
	"runtime"
	"testing"
	"time"
	"unsafe"
)

// TestPinnedRange: slices inside a pinned arena are found with the arena's
// bounds, slices that cross its end or lie elsewhere are not, unpinning
// forgets it, and the lookup does not allocate.
func TestPinnedRange(t *testing.T) {
	a := make([]byte, 4096)
	other := make([]byte, 64)
	unpin := PinArena(a)
	lo, hi, ok := PinnedRange(unsafe.Pointer(&a[100]), 200)
	if !ok || lo != uintptr(unsafe.Pointer(&a[0])) || hi != lo+4096 {
		t.Fatalf("inside: %x %x %v", lo, hi, ok)
	}
	if _, _, ok := PinnedRange(unsafe.Pointer(&a[4000]), 200); ok {
		t.Error("a range crossing the arena's end is pinned")
	}
	if _, _, ok := PinnedRange(unsafe.Pointer(&other[0]), 1); ok {
		t.Error("another allocation is pinned")
	}
	if n := testing.AllocsPerRun(100, func() { PinnedRange(unsafe.Pointer(&a[1]), 1) }); n != 0 {
		t.Errorf("PinnedRange allocates %v times", n)
	}
	unpin()
	unpin()
	if _, _, ok := PinnedRange(unsafe.Pointer(&a[100]), 1); ok {
		t.Error("still pinned after unpin")
	}
}

// TestPoolArenasPinned: a pool's buffers are in pinned memory until the
// pool is garbage.
func TestPoolArenasPinned(t *testing.T) {
	p := NewPool(8, 2048, 128)
	b := p.Get()
	if _, _, ok := PinnedRange(unsafe.Pointer(&b.Slot()[0]), b.Cap()); !ok {
		t.Fatal("a pool buffer is not in pinned memory")
	}
	addr := unsafe.Pointer(&b.Slot()[0])
	p, b = nil, nil
	for range 50 {
		runtime.GC()
		if _, _, ok := PinnedRange(addr, 1); !ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Error("a dropped pool's arena stayed pinned")
}

// TestPins: Addr gives a slice's address (0 for an empty one), pins only
// memory outside pinned arenas (so a batch over pool memory allocates
// nothing), and Unpin forgets the arena it found.
func TestPins(t *testing.T) {
	p := NewPool(8, 2048, 128)
	b := p.Get()
	defer p.PutN([]*Buf{b})
	var pins Pins
	slot := b.Slot()
	if got := pins.Addr(slot[10:20]); got != uintptr(unsafe.Pointer(&slot[10])) || pins.pinning {
		t.Fatalf("pool memory: %x, pinning %v", got, pins.pinning)
	}
	if pins.Addr(nil) != 0 {
		t.Error("empty slice has an address")
	}
	if n := testing.AllocsPerRun(100, func() { pins.Addr(slot[100:200]); pins.Unpin() }); n != 0 {
		t.Errorf("Addr over pool memory allocates %v times", n)
	}
	other := make([]byte, 64)
	if got := pins.Addr(other); got != uintptr(unsafe.Pointer(&other[0])) || !pins.pinning {
		t.Fatalf("other memory: %x, pinning %v", got, pins.pinning)
	}
	pins.Unpin()
	if pins.pinning || pins.lo != 0 || pins.hi != 0 {
		t.Errorf("after Unpin: %+v", pins)
	}
}

// TestPinsCovers: Covers holds for non-empty ranges inside the arena found
// last and for nothing else, the zero Pins and empty ranges included.
func TestPinsCovers(t *testing.T) {
	p := NewPool(8, 2048, 128)
	b := p.Get()
	defer p.PutN([]*Buf{b})
	var pins Pins
	slot := b.Slot()
	u := uintptr(unsafe.Pointer(&slot[0]))
	if pins.Covers(u, 1) {
		t.Fatal("the zero Pins covers memory")
	}
	pins.Addr(slot[:16])
	lo, hi := pins.lo, pins.hi
	for _, c := range []struct {
		u, n uintptr
		want bool
	}{
		{u, 1, true},
		{u, uintptr(len(slot)), true},
		{lo, hi - lo, true},
		{hi - 1, 1, true},
		{hi - 1, 2, false},
		{hi, 1, false},
		{lo - 1, 1, false},
		{lo - 1, 2, false},
		{u, 0, false},
		{lo, hi - lo + 1, false},
		{lo + 1, ^uintptr(0), false},
	} {
		if got := pins.Covers(c.u, c.n); got != c.want {
			t.Errorf("Covers(lo%+d, %d) = %v, want %v", int(c.u-lo), c.n, got, c.want)
		}
	}
	pins.Unpin()
	if pins.Covers(u, 1) {
		t.Error("Covers after Unpin")
	}
}
